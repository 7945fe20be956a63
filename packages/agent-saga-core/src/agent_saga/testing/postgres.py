"""A real PostgreSQL server for tests of the fleet-mode store and kill switch.

:func:`postgres_server` yields a connection URL: the one in ``AGENT_SAGA_TEST_PG_URL`` (CI
starts Debian's server and sets it), or else that of a throwaway cluster it creates with the
local PostgreSQL binaries (``initdb`` into a temporary directory, run as the ``postgres`` user
when this process is root, listening on a free port of 127.0.0.1) and removes afterwards.
:func:`scratch_schema` gives each test its own schema and drops it, so reruns start clean.

Nothing here is used by the engine; psycopg is imported only by :func:`scratch_schema`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ENV_URL = "AGENT_SAGA_TEST_PG_URL"


class PostgresUnavailable(Exception):
    """No server was named and none could be started here."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (newest Debian version first)."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for bindir in candidates:
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayCluster:
    """A PostgreSQL cluster in a temporary directory, stopped and deleted by :meth:`stop`."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="agent-saga-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._user: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            import pwd

            try:
                entry = pwd.getpwnam("postgres")
            except KeyError as exc:
                shutil.rmtree(self.root)
                raise PostgresUnavailable("running as root and there is no postgres user") from exc
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            args,
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            **self._user,
        )
        if result.returncode != 0:
            raise PostgresUnavailable(f"{Path(args[0]).name} failed: {result.stderr.strip()}")

    def start(self) -> str:
        """Create and start the cluster; returns its URL. Raises :class:`PostgresUnavailable`."""
        try:
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            )
            options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
            self._run(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.root / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "30",
                "start",
            )
        except BaseException:
            self.stop()
            raise
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """Stop the server (immediately) and delete its directory. Idempotent."""
        if (self.data / "postmaster.pid").exists():
            pg_ctl = str(self.bindir / "pg_ctl")
            subprocess.run(
                [pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                cwd=self.root,
                capture_output=True,
                check=False,
                timeout=60,
                **self._user,
            )
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield the URL of a PostgreSQL server for tests.

    Raises:
        PostgresUnavailable: ``AGENT_SAGA_TEST_PG_URL`` is unset and no cluster could be started.
    """
    url = os.environ.get(ENV_URL)
    if url:
        yield url
        return
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            f"{ENV_URL} is not set and no PostgreSQL binaries (initdb, pg_ctl) were found; "
            "install PostgreSQL (Debian: apt-get install postgresql) or run .ci/run"
        )
    cluster = ThrowawayCluster(bindir)
    url = cluster.start()
    try:
        yield url
    finally:
        cluster.stop()


@contextmanager
def server_for_tests() -> Iterator[str]:
    """:func:`postgres_server` for a pytest test: fails under ``CI``, skips elsewhere.

    CI must run every fleet-mode test against a real server, so a missing one is a failure
    there; on a developer's machine without PostgreSQL the test is skipped with the reason.
    """
    import pytest

    with ExitStack() as stack:
        try:
            url = stack.enter_context(postgres_server())
        except PostgresUnavailable as exc:
            if os.environ.get("CI"):
                pytest.fail(f"CI must run this test against PostgreSQL: {exc}")
            pytest.skip(str(exc))
        yield url


@contextmanager
def scratch_schema(url: str) -> Iterator[str]:
    """Yield a fresh schema name and drop that schema (and everything in it) afterwards."""
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


__all__ = [
    "ENV_URL",
    "PostgresUnavailable",
    "ThrowawayCluster",
    "postgres_server",
    "scratch_schema",
    "server_for_tests",
]
