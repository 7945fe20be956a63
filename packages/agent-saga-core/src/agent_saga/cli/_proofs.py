"""Commands that prove things about the log: keys, checkpoint, prove, verify-proof, certify.

They read the configured log (the home's file log or the fleet log on PostgreSQL, see
:mod:`._logfile`); checkpoints and the signing key are always the home's, where the kits
writing that log publish theirs. ``verify`` is in :mod:`._verify`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .._history.lookup import resolve_saga_id
from .._history.views import SagaLookupError
from .._log.chain import HASH_MISMATCH
from .._log.source import FileLogSource
from ..proofs._audit import (
    certify,
    home_verifiers,
    latest_problem,
    prove,
    publish,
    snapshot,
)
from ..proofs._certify import Finding
from ..proofs._checkpoint import CheckpointError
from ..proofs._disclosure import MAX_BUNDLE_BYTES, DisclosureError, verify_bundle
from ..proofs._mesh.marker import is_mesh
from ..proofs._note import NoteVerifier
from ..proofs._signing import read_verifier
from ._errors import EXIT_FAILED, BadInputError, CliError, one_line
from ._logfile import reading, require_home
from ._mesh import fleet_budgets
from ._redact import admin_key_option, redact
from ._settings import KEY_SOURCES, Settings, current_settings
from ._verify import named_checkpoint, store_point


def _verifier(key: str | None) -> NoteVerifier | None:
    return None if key is None else read_verifier(key)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    try:
        path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc}") from exc


@click.command()
def checkpoint() -> None:
    """Sign and publish a checkpoint of the log now (checkpoints/latest.note)."""
    settings = current_settings()
    with reading(settings) as source:
        log = snapshot(source, keep_records=False, home=settings.home, unfinished=True)
    if not log.chain.ok:
        raise CliError(f"the log does not verify: {log.chain.error}; run 'agent-saga verify'")
    published = publish(settings.home, log)
    settings.console.print(
        f"checkpoint: {published.size} records, origin {published.origin}", markup=False
    )
    settings.console.print(published.note, markup=False, end="")


@click.command(name="prove")
@click.argument("saga_id")
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the bundle (JSON).",
)
def prove_command(saga_id: str, out: Path) -> None:
    """Write a disclosure bundle: one saga's records, proven included and complete.

    SAGA_ID may be a unique prefix of the id (dashes and case do not matter).
    """
    settings = current_settings()
    try:
        with reading(settings, hold_lock=False) as source:
            saga_id = resolve_saga_id((r.saga for r in source.records() if r.saga), saga_id)
            bundle = prove(settings.home, saga_id, source)
    except SagaLookupError as exc:
        raise BadInputError(str(exc)) from exc
    except (DisclosureError, CheckpointError) as exc:
        raise CliError(str(exc)) from exc
    _write_json(out, bundle)
    count = len(bundle["records"])
    settings.console.print(f"wrote {out}: saga {saga_id}, {count} records", markup=False)


@click.command(name="verify-proof")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", required=True, help="The log's public key (text or file).")
@admin_key_option
def verify_proof(bundle: Path, key: str) -> None:
    """Check a disclosure bundle offline, with the log's public key only (exit 1 if not)."""
    settings = current_settings()
    verifier = read_verifier(key)
    if bundle.stat().st_size > MAX_BUNDLE_BYTES:
        raise CliError(f"{bundle} is larger than {MAX_BUNDLE_BYTES} bytes")
    chain_key = settings.chain_key()
    try:
        report = verify_bundle(bundle.read_bytes(), [verifier], chain_key=chain_key)
    except DisclosureError as exc:
        hint = ""
        if chain_key is None and HASH_MISMATCH in str(exc):
            hint = f" (if the log is keyed, give its chain key: {KEY_SOURCES})"
        settings.console.print(f"NOT VERIFIED: {one_line(str(exc))}{hint}", markup=False)
        raise SystemExit(EXIT_FAILED) from exc
    settings.console.print(
        f"verified: saga {report.saga}, {len(report.records)} records, complete, "
        f"included in checkpoint of {report.checkpoint.size} records "
        f"({report.checkpoint.origin})",
        markup=False,
    )


@click.command(name="certify")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the signed certificate (JSON) here.",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    help="A merged log only: a fleet budget NAME=LIMIT[:AMOUNT[:TOOL,...]] (repeatable).",
)
@click.option(
    "--since",
    metavar="NOTE|latest|N",
    default=None,
    help="Certify only the records after this checkpoint (a saved note, or 'latest', the "
    "home's) or after record N, reading from the newest checkpoint a verify confirmed at or "
    "before it; the sagas those records touch and every unfinished saga are checked.",
)
@admin_key_option
def certify_command(out: Path | None, budgets: tuple[str, ...], since: str | None) -> None:
    """Check the chain, the checkpoint and every saga; exit 1 if anything is CRITICAL.

    On a mesh directory (--home naming one): every origin against its own key, every saga of
    the merged view, and the conflicts between origins.
    """
    settings = current_settings()
    if since is not None and (budgets or is_mesh(settings.home)):
        raise BadInputError("--since applies to a home's own log, not to a mesh directory")
    if since is not None:
        cert, findings = _certify_since(settings, since)
    elif is_mesh(settings.home):
        from ..proofs._mesh.certify import certify_merged

        limits = fleet_budgets(budgets)
        cert, findings = certify_merged(settings.home, budgets=limits, key=settings.chain_key())
    elif budgets:
        raise BadInputError("--budget applies to a merged log (a mesh directory)")
    else:
        with reading(settings, hold_lock=False) as source:
            cert, findings = certify(settings.home, source)
    for finding in findings:
        where = f" saga {finding.saga}" if finding.saga else ""
        step = f" step {finding.ordinal} ({finding.tool})" if finding.ordinal is not None else ""
        line = f"{finding.severity}{where}{step}: {finding.message}"
        settings.console.print(one_line(line), markup=False)  # ids and tools come from the log
    counts = cert["counts"]
    verdict = "certified" if cert["ok"] else "NOT CERTIFIED"
    passkeys = counts.get("passkey_votes", 0)
    verified = f", {passkeys} passkey votes verified" if passkeys else ""
    settings.console.print(
        f"{verdict}: {counts['sagas']} sagas, {counts['records']} records, "
        f"{counts['critical']} critical, {counts['warning']} warnings{verified}",
        markup=False,
    )
    if out is not None:
        _write_json(out, cert)
    if not cert["ok"]:
        raise SystemExit(EXIT_FAILED)


def _certify_since(settings: Settings, since: str) -> tuple[dict[str, Any], list[Finding]]:
    """``certify --since``: the range is printed first; resume points are stored as a verify
    stores them once the log matched its checkpoints."""
    from ..proofs._certify_since import certify_since

    home = settings.home
    require_home(home)
    checkpoint = None
    if since.strip().isdigit():
        after = int(since)
    else:
        checkpoint, rejected = named_checkpoint(home, since, home_verifiers(home, None))
        if checkpoint is None:
            raise CliError(f"--since {since}: the checkpoint is rejected: {rejected}")
        after = checkpoint.size
    with reading(settings, hold_lock=False) as source:
        if not isinstance(source, FileLogSource):
            raise BadInputError("--since reads a home's file log (a fleet log: certify in full)")
        cert, findings, span, log = certify_since(home, source, after, checkpoint)
    settings.console.print(one_line(span.describe()), markup=False)
    if cert["ok"]:
        latest, _ = latest_problem(home, log, home_verifiers(home, None))
        for confirmed in (checkpoint, latest):
            store_point(home, log, confirmed)
    return cert, findings


COMMANDS = (checkpoint, prove_command, verify_proof, certify_command, redact)
