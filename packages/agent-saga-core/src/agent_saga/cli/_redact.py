"""The ``redact`` command, the administrator keys the reading commands trust, and what
``verify`` says about masked records.

Masking needs an administrator's private key (``--sign``), kept outside the home; readers
trust the public keys in ``admin_keys`` (``agent-saga.toml`` or ``[tool.agent-saga]``), or
exactly those given with ``--admin-key`` to ``verify``, ``certify`` and ``verify-proof``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .._log.admins import trusting_admins
from ..proofs._audit import LogSnapshot
from ..proofs._redact import RedactionReport, confirm_redactions, redact_path
from ._errors import EXIT_FAILED, BadInputError, one_line
from ._logfile import is_fleet, require_log
from ._settings import current_settings

F = TypeVar("F", bound=Callable[..., Any])

ADMIN_KEY_HELP = (
    "Trust this administrator public key (verifier key text, or a PEM or verifier key file) "
    "for redactions and approver keys, instead of admin_keys in agent-saga.toml; repeatable."
)


def admin_key_option(command: F) -> F:
    """Give ``command`` an ``--admin-key`` option: it then runs trusting exactly those keys."""

    @click.option("--admin-key", "admin_keys", multiple=True, help=ADMIN_KEY_HELP)
    @functools.wraps(command)
    def run(*args: Any, admin_keys: tuple[str, ...], **kwargs: Any) -> Any:
        if not admin_keys:
            return command(*args, **kwargs)
        with trusting_admins(admin_keys):
            return command(*args, **kwargs)

    return run  # type: ignore[return-value]


def _outside_home(key: Path, home: Path) -> None:
    resolved, root = key.resolve(), home.resolve()
    if resolved == root or root in resolved.parents:
        raise BadInputError(
            f"{key} is inside the home: an administrator key must be kept where the agents "
            "cannot read it"
        )


@click.command()
@click.argument("path", required=False)
@click.option("--seq", "seqs", type=int, multiple=True, help="Only this record (repeatable).")
@click.option("--reason", default="", help="Why (kept in the redaction record).")
@click.option(
    "--sign",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="The administrator's Ed25519 private key (PEM, from 'keys new'), kept outside the home.",
)
@click.option(
    "--confirm",
    is_flag=True,
    help="Instead of masking: sign the unsigned redactions an older version wrote.",
)
def redact(path: str | None, seqs: tuple[int, ...], reason: str, sign: Path, confirm: bool) -> None:
    """Mask stored values in place, e.g. 'args.card.cvv' or 'args.items.*.cvv'.

    Only values under args, result, error and cause can be masked. The masked records keep
    their hashes, so the log and its checkpoints still verify; a log.redaction record signed
    with --sign says what was masked. Refused while an agent has a file log open. Exit 1 when
    nothing matched.
    """
    settings = current_settings()
    _outside_home(sign, settings.home)
    key = settings.chain_key()
    if confirm:
        if path is not None or seqs:
            raise BadInputError("--confirm takes no PATH and no --seq")
        if is_fleet(settings):
            raise BadInputError("--confirm applies to a file log (a fleet log has no unsigned one)")
        require_log(settings.home)
        report = confirm_redactions(settings.home, admin_key=sign, key=key)
    elif path is None:
        raise BadInputError("give the PATH of the values to mask (or --confirm)")
    elif is_fleet(settings):
        from ..proofs._redact_pg import redact_postgres

        report = redact_postgres(
            str(settings.store()),
            path,
            admin_key=sign,
            seqs=seqs or None,
            key=key,
            reason=reason,
            schema=settings.store_schema(),
        )
    else:
        require_log(settings.home)
        report = redact_path(
            settings.home, path, admin_key=sign, seqs=seqs or None, key=key, reason=reason
        )
    _print(report, path)


def _print(report: RedactionReport, path: str | None) -> None:
    settings = current_settings()
    if not report.masked:
        what = "no unsigned redaction" if path is None else f"no stored value at {path}"
        settings.console.print(f"{one_line(what)}; nothing changed", markup=False)
        raise SystemExit(EXIT_FAILED)
    verb = "confirmed" if path is None else "masked"
    for seq, paths in sorted(report.masked.items()):
        settings.console.print(f"{verb} record {seq}: {one_line(', '.join(paths))}", markup=False)
    settings.console.print(
        f"signed as record {report.record_seq}; the log still verifies", markup=False
    )


def redaction_lines(log: LogSnapshot) -> list[str]:
    """One line per record masked after it was written (for ``verify``)."""
    lines = []
    for record in log.redactions:
        if "signature" not in record.data:
            continue
        entries = record.data.get("records")
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            masked = entry.get("paths")
            paths = ", ".join(str(p) for p in masked) if isinstance(masked, list) else "?"
            rest = (
                "the rest of it is still checked by its hash"
                if "leaves" in entry
                else "it was written by an older version, so what remains of it rests on "
                "that signature, not on its hash"
            )
            lines.append(
                f"note: record {entry.get('seq')} was masked after it was written ({paths}; "
                f"redaction record {record.seq}, signed by administrator "
                f"{str(record.data.get('admin'))[:12]}...): {rest}"
            )
    return lines
