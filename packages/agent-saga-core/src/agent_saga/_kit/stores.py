"""What a kit opens from its arguments and the project configuration: the log store (with its
chain key and, for a fleet, its schema), the kill switch beside it, and the approvals.

The configuration is read only for what the arguments leave open: ``store=None`` means
``$AGENT_SAGA_STORE`` or ``store``; ``chain_key=None`` means the key file named by
``$AGENT_SAGA_CHAIN_KEY_FILE`` or ``chain_key_file`` (read only when a store is opened by name);
a PostgreSQL store's schema is ``$AGENT_SAGA_STORE_SCHEMA`` or ``store_schema``, else
``agent_saga``. psycopg is imported only for a PostgreSQL store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .._config import (
    Config,
    configured_chain_key,
    find_config,
    is_postgres_url,
    schema_setting,
    store_setting,
)
from .._errors import ConfigurationError
from .._gate.killswitch import FileKillSwitch, KillSwitch
from .._log.filestore import FileLogStore
from .._log.segments import SEGMENT_BYTES, SEGMENT_RECORDS
from .._log.store import LogStore, MemoryLogStore

if TYPE_CHECKING:
    from .._approvals.wait import Approvals


def passkey_setting(
    require_passkey: bool | None, config: Callable[[], Config] = find_config
) -> bool:
    """Whether a kit counts only passkey votes: ``require_passkey`` when given, else
    ``require_passkey`` in the configuration, else ``False``.

    Raises:
        ConfigurationError: ``require_passkey`` is neither ``None`` nor a bool.
    """
    if require_passkey is not None:
        if type(require_passkey) is not bool:
            raise ConfigurationError(
                f"require_passkey must be True or False, not {require_passkey!r}"
            )
        return require_passkey
    return config().extra.get("require_passkey", False) is True


def configured_approvals(
    require_passkey: bool = False, config: Callable[[], Config] = find_config
) -> Approvals | None:
    """Approvals with the project configuration's ``approvers``, if it lists any or
    ``require_passkey`` is set (then only passkey votes count; with no approvers listed, only
    a rule naming its approvers can be approved at all).

    Raises:
        ConfigurationError: ``approvers`` is not a list of ids; ``require_passkey`` without the
            ``agent-saga[passkeys]`` extra.
    """
    approvers = config().extra.get("approvers") or []
    if not approvers and not require_passkey:
        return None
    if not isinstance(approvers, list) or not all(isinstance(a, str) for a in approvers):
        raise ConfigurationError("approvers in the configuration is a list of approver ids")
    from .._approvals.wait import Approvals

    return Approvals(approvers=approvers, require_passkey=require_passkey)


def refuse_votes_without_passkey(approvals: object) -> None:
    """Raise unless ``approvals`` counts only passkey votes (a kit asked to require them).

    Raises:
        ConfigurationError: the approvals given (or a connector's) would count other votes.
    """
    if getattr(approvals, "require_passkey", False) is not True:
        raise ConfigurationError(
            f"require_passkey=True, but the approvals given ({type(approvals).__name__}) count "
            "votes without a passkey: pass Approvals(require_passkey=True) or leave approvals out"
        )


def open_store(
    store: LogStore | str | None,
    home: Path,
    key: bytes | None,
    config: Callable[[], Config] = find_config,
) -> LogStore:
    """The store a kit writes to (see the module docstring for what ``None`` means).

    ``config`` gives the project configuration (a kit passes its own lookup, so the file is
    parsed once per kit); it is called only when ``store`` or ``key`` is ``None``.

    Raises:
        ConfigurationError: an unknown store, or a configured chain key file that cannot be
            read; and whatever opening the store raises (a corrupt log, an unreachable server).
    """
    if isinstance(store, LogStore):
        return store
    config = functools.cache(config)  # the file is read at most once
    if store is None:
        store = store_setting(config())
    if key is None:
        key = configured_chain_key(config())
    if store is None or store == "file":
        limits = config().segments
        return FileLogStore(
            home,
            key=key,
            segment_bytes=limits.get("segment_bytes", SEGMENT_BYTES),
            segment_records=limits.get("segment_records", SEGMENT_RECORDS),
        )
    if store == "memory":
        return MemoryLogStore(key=key)
    if is_postgres_url(store):
        from .._postgres.connection import DEFAULT_SCHEMA
        from .._postgres.store import PostgresLogStore  # psycopg is imported only when asked for

        schema = schema_setting(config()) or DEFAULT_SCHEMA
        return PostgresLogStore(str(store), key=key, schema=schema)
    raise ConfigurationError(
        f"store must be 'file', 'memory', a postgresql:// URL or a LogStore, got {store!r}"
    )


def default_switch(store: LogStore, home: Path) -> KillSwitch:
    """A fleet's kill switch is a row beside its PostgreSQL log; otherwise the HALT file."""
    if store.kind == "postgres":
        from .._postgres.store import PostgresLogStore

        if isinstance(store, PostgresLogStore):
            from .._gate.killswitch_pg import PostgresKillSwitch

            return PostgresKillSwitch.beside(store)
    return FileKillSwitch(home)


def trust_checkpoints(store: LogStore, home: Path) -> None:
    """Let ``store``'s saga index (a file store's) check the unfinished sagas it names against
    the statement signed in ``home``'s latest checkpoint (:mod:`agent_saga._log.indexsets`)."""
    if not isinstance(store, FileLogStore) or store.saga_index is None:
        return
    if store.saga_index.statement is None:
        from ..proofs._checkpoints import CHECKPOINTS_DIR, LATEST_NAME
        from ..proofs._unfinished import LatestStatement

        store.saga_index.statement = LatestStatement(home, home / CHECKPOINTS_DIR / LATEST_NAME)
