"""``agent-saga archive``: move the log's sealed segments to the home's archive.

See :mod:`agent_saga._log.archiving` for what "move" means (copy, verify the copy, record it,
and only then remove the local file); nothing is ever deleted from the archive.
"""

from __future__ import annotations

import fcntl
import os

import click

from .._errors import ConfigurationError, CorruptLogError
from .._log.archive import ARCHIVE_FILE, configured_target, parse_target
from .._log.archiving import archive_sealed
from .._log.files import write_atomic
from .._log.segments import SEGMENTS_DIR
from ._errors import BadInputError, CliError, one_line
from ._logfile import require_home
from ._settings import current_settings


@click.command()
@click.option(
    "--to",
    "where",
    default=None,
    metavar="DIR|s3://BUCKET/PREFIX",
    help="Set the home's archive first (kept in <home>/archive); "
    "s3 URLs take ?endpoint=URL&region=NAME.",
)
def archive(where: str | None) -> None:
    """Move the log's sealed segments to the home's archive (a directory or an S3 bucket).

    Each segment is verified, copied, read back and compared before its local file is removed;
    it stays verifiable and provable from there. The open segment is never moved.
    """
    settings = current_settings()
    home = settings.home
    require_home(home)
    try:
        if where is not None:
            parse_target(where)  # refuse a bad one before writing it
            write_atomic(home / ARCHIVE_FILE, (where.strip() + "\n").encode())
        target = configured_target(home)
    except ConfigurationError as exc:
        raise BadInputError(str(exc)) from exc
    if target is None:
        raise BadInputError(f"no archive configured in {home}: give --to DIR or s3://BUCKET")
    (home / SEGMENTS_DIR).mkdir(exist_ok=True)
    lock = os.open(home / SEGMENTS_DIR / ".archive.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one archiver at a time per home
        moved = archive_sealed(home, target, key=settings.chain_key())
    except (CorruptLogError, OSError, ConfigurationError) as exc:
        raise CliError(f"archiving stopped: {one_line(str(exc))}") from exc
    finally:
        os.close(lock)
    for item in moved:
        settings.console.print(
            f"archived segment {item.first} ({item.size} bytes) -> {item.url}", markup=False
        )
    settings.console.print(f"{len(moved)} segment(s) moved to the archive", markup=False)
