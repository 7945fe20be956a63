"""Finding a saga by its id or a prefix of it, as a person types one at the command line."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .views import AmbiguousSagaError, SagaView, UnknownSagaError


def find_saga(views: Sequence[SagaView], id_or_prefix: str) -> SagaView:
    """The saga whose id is ``id_or_prefix``, or the only one whose id starts with it.

    An exact id wins over prefix matches (so ``saga-1`` is found even if ``saga-10`` exists).
    Dashes and case do not matter in a prefix: ``0193B5E27C1A`` finds the UUID
    ``0193b5e2-7c1a-...``; ids of any other form (older logs) are matched the same way.

    Raises:
        UnknownSagaError: nothing matches (or the text is empty).
        AmbiguousSagaError: several ids start with the text; the message lists them.
    """
    by_id = {view.id: view for view in views}
    return by_id[resolve_saga_id(by_id, id_or_prefix)]


def resolve_saga_id(ids: Iterable[str], id_or_prefix: str, *, total: int | None = None) -> str:
    """The id among ``ids`` that ``id_or_prefix`` names, as :func:`find_saga` finds it.

    ``total`` is how many sagas the log holds, for the message, when ``ids`` are only the
    candidates an index found (default: ``len(ids)``).

    Raises:
        UnknownSagaError: nothing matches (or the text is empty).
        AmbiguousSagaError: several ids start with the text; the message lists them.
    """
    wanted = id_or_prefix.strip()
    if not wanted:
        raise UnknownSagaError("empty saga id")
    known = list(dict.fromkeys(ids))
    if wanted in known:
        return wanted
    key = _id_key(wanted)
    exact = [saga_id for saga_id in known if _id_key(saga_id) == key]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [saga_id for saga_id in known if _id_key(saga_id).startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        count = len(known) if total is None else total
        raise UnknownSagaError(f"no saga matches {wanted!r} ({count} saga(s) in the log)")
    more = f", ... ({len(matches) - 5} more)" if len(matches) > 5 else ""
    shown = ", ".join(matches[:5]) + more
    raise AmbiguousSagaError(
        f"saga id prefix {wanted!r} is ambiguous: {len(matches)} sagas match: {shown}", matches
    )


def _id_key(saga_id: str) -> str:
    return saga_id.replace("-", "").lower()
