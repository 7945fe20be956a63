"""``agent-saga verify``: the chain, the checkpoints, and resuming from a verified checkpoint.

A full ``verify`` reads every record once in a streaming pass (a Merkle frontier of O(log n)
hashes, no record kept), compares the log with the latest checkpoint by recomputing the root
at its size, and, when everything holds, stores a resume point for that checkpoint
(``checkpoints/verified/``, see :mod:`agent_saga.proofs._resume`). ``verify --since NOTE``
(``latest`` for the home's latest checkpoint) also checks the log against NOTE, and starts
from the newest stored resume point of at most NOTE's size when there is one: only the
records after it are read. Storing a point is a courtesy: a home that cannot be written is
verified all the same. A full ``verify`` of a file log also feeds each line to a comparison of
the saga index with the log (:mod:`agent_saga._log.indexaudit`): an index that differs is
rebuilt from the log and the command exits 1.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import click

from .._errors import CorruptLogError
from .._log.chain import Chain
from .._log.indexaudit import IndexAudit
from .._log.sagaindex import INDEX_DIR, INDEX_NAME, SagaIndex
from .._log.source import FileLogSource, LogSource
from ..proofs._audit import LogSnapshot, check_checkpoint, home_verifiers, latest_problem, snapshot
from ..proofs._certify import CRITICAL
from ..proofs._checkpoint import Checkpoint, CheckpointError, open_checkpoint
from ..proofs._checkpoints import CheckpointLog
from ..proofs._mesh.marker import is_mesh
from ..proofs._note import NoteVerifier
from ..proofs._resume import ResumePoint, load_point, save_point
from ..proofs._signing import read_verifier
from ._errors import EXIT_FAILED, BadInputError, one_line
from ._logfile import reading
from ._redact import admin_key_option, redaction_lines
from ._render import render_verify
from ._settings import Settings, pass_settings

LATEST = "latest"
INDEX_DIFFERS = "saga index: DIFFERS from the log"
KEY_HELP = "The log's public key (its text, or a file holding it). Default: the home's own key."


def run_verify(settings: Settings, since: str | None, key: str | None) -> None:
    """Verify the configured log (see the module docstring); exit 1 when anything fails."""
    home = settings.home
    verifiers = home_verifiers(home, None if key is None else read_verifier(key))
    older, rejected = (None, None) if since is None else named_checkpoint(home, since, verifiers)
    lines: list[str] = []
    point = None
    if older is not None and older.size > 0:
        point, refused = load_point(home, older.size, verifiers)
        lines.extend(refused)
    capture = () if older is None else (older.size,)
    with reading(settings) as source:
        audit = index_audit(source) if since is None else None
        log = snapshot(
            source, keep_records=False, home=home, capture=capture, resume=point,
            on_line=None if audit is None else audit.see,
        )  # fmt: skip
    render_verify(settings.console, log.chain, source.where, source.unit)
    assert log.stream is not None
    lines.extend(log.stream.notes)
    if log.stream.resumed_from:
        read = log.chain.records - log.stream.resumed_from
        lines.append(
            f"resumed after record {log.stream.resumed_from} (verified earlier against its "
            f"signed checkpoint): read the {read} records after it"
        )
    ok = log.chain.ok
    if rejected is not None:
        lines.append(f"checkpoint {since} REJECTED: {rejected}")
        ok = False
    elif older is not None:
        problem = check_checkpoint(log, older)
        if problem is None:
            lines.append(
                f"consistent with {since} ({older.size} records): nothing removed or changed"
            )
        else:
            lines.append(f"INCONSISTENT with {since}: {problem}")
            ok = False
    latest, finding = latest_problem(home, log, verifiers)
    if finding is not None:
        lines.append(("" if finding.severity == CRITICAL else "note: ") + finding.message)
        ok = ok and finding.severity != CRITICAL
    elif latest is not None:
        lines.append(f"consistent with the latest checkpoint ({latest.size} records)")
    if audit is not None:
        found = index_finding(audit, log.chain.ok, home, source)
        if found is not None:
            lines.append(found)
            ok = ok and not found.startswith(INDEX_DIFFERS)
    for line in [*lines, *redaction_lines(log)]:
        settings.console.print(one_line(line), markup=False)
    if not ok:
        raise SystemExit(EXIT_FAILED)
    for checkpoint in (older, latest):
        store_point(home, log, checkpoint)


def index_audit(source: LogSource) -> IndexAudit | None:
    """An audit of the saga index beside a file log, for a full verify to feed; ``None`` for
    another store, or when there is no index (or not one SQLite can read: readers rebuild it)."""
    if not isinstance(source, FileLogSource):
        return None
    path = source.home / INDEX_DIR / INDEX_NAME
    if not path.is_file():
        return None
    try:
        return IndexAudit(path)
    except sqlite3.Error:
        return None


def index_finding(audit: IndexAudit, chain_ok: bool, home: Path, source: LogSource) -> str | None:
    """The line verify prints of the saga index once the pass is over: it agrees with the log,
    or it differs (then it is rebuilt from the log); ``None`` when the log did not verify."""
    problem = audit.finish()
    if not chain_ok:
        return None
    if problem is None:
        return f"saga index: {audit.checked}"
    key = source.key if isinstance(source, FileLogSource) else None
    index = SagaIndex(home, Chain(key))
    try:
        index.rebuild()
        done = "rebuilt from the log"
    except (OSError, sqlite3.Error, CorruptLogError) as exc:
        done = f"could not be rebuilt ({exc}): delete {index.path}"
    finally:
        index.close()
    return f"{INDEX_DIFFERS}: {problem}; {done}"


def store_point(home: Path, log: LogSnapshot, checkpoint: Checkpoint | None) -> None:
    """Keep a resume point for ``checkpoint`` when the pass captured its state in a file log.

    Only called once the log matched the checkpoint; an unwritable home is not an error.
    """
    if checkpoint is None or log.stream is None:
        return
    state = log.stream.states.get(checkpoint.size)
    if state is None or state.offset < 0:
        return
    with contextlib.suppress(OSError):
        save_point(home, ResumePoint(checkpoint, state))


def named_checkpoint(
    home: Path, since: str, verifiers: list[NoteVerifier]
) -> tuple[Checkpoint | None, str | None]:
    """The checkpoint ``--since`` names (a saved note, or ``latest``), or why it was rejected.

    Raises:
        BadInputError: the note cannot be read, or there is no key to check it with.
    """
    if since == LATEST and not Path(since).exists():
        try:
            note = CheckpointLog(home).read_note()
        except CheckpointError as exc:
            return None, str(exc)
        if note is None:
            raise BadInputError("--since latest: the home has no checkpoint yet")
    else:
        try:
            note = Path(since).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"cannot read the checkpoint {since}: {exc}") from exc
    if not verifiers:
        raise BadInputError("no key to check the checkpoint with: give --key")
    try:
        return open_checkpoint(note, verifiers), None
    except CheckpointError as exc:
        return None, str(exc)


@click.command()
@click.option(
    "--since",
    default=None,
    metavar="NOTE|latest",
    help="A checkpoint saved earlier (or 'latest', the home's): the log must still extend it; "
    "reading starts after the newest checkpoint a verify confirmed, up to this one.",
)
@click.option("--key", default=None, help=KEY_HELP)
@admin_key_option
@pass_settings
def verify(settings: Settings, since: str | None, key: str | None) -> None:
    """Verify the hash chain from disk, then the log against its checkpoints.

    The chain alone catches a modified, deleted, inserted, swapped or duplicated record; the
    file log's synced watermark (log.synced) catches records cut from its end; a checkpoint
    also catches a truncated tail or a log rewritten from some record on. Exit 1 at the first
    break or inconsistency. Checkpoints are the home's, for a fleet log too. With --since, the
    records a verify already confirmed against a signed checkpoint are not read again (a full
    verify, without --since, reads them all). A full verify of a home's file log also compares
    its saga index with the log, and rebuilds it (exit 1) when it differs.
    """
    if is_mesh(settings.home):  # a merged log: every origin against its own key
        from ._mesh import verify_mesh

        if not verify_mesh(settings):
            raise SystemExit(EXIT_FAILED)
        return
    run_verify(settings, since, key)
