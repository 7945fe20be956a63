"""``agent-saga cloud-server``: the control plane, added to ``agent-saga`` by entry point.

* ``agent-saga cloud-server`` serves the API on 127.0.0.1:8000 over SQLite in the home
  (``<home>/control-plane.sqlite3``), printing its URL and, on the very first start, an admin
  token (shown once; only its hash is kept);
* ``--store postgresql://...`` (or ``$AGENT_SAGA_STORE`` when it names a PostgreSQL server)
  keeps everything in PostgreSQL, schema ``--store-schema``: start as many processes as you
  like on one database;
* ``agent-saga cloud-server token create|list|revoke`` manages tokens directly in the store
  (for whoever can reach the database; over HTTP an admin token does the same);
* ``agent-saga cloud-server passkeys enrol SUBJECT`` prints a one-time enrolment code that lets
  SUBJECT register a passkey on the dashboard; ``passkeys list`` and ``passkeys revoke`` list
  and revoke approvers' passkeys (the same store, also ``agent-saga ui``'s home).
"""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any

import click
from agent_saga.cli import current_settings

from .listen import PORT, listen
from .settings import ServerSettings
from .until_stopped import run_until_stopped


def _store_value(store: str | None) -> str | None:
    """``--store``, else fleet mode's setting (``$AGENT_SAGA_STORE`` or ``store`` in the
    configuration): only a database URL means anything here, a file or memory log is SQLite."""
    if store is None:
        store = current_settings().store()
    if store is None or store in ("file", "memory"):
        return None
    return store


def _open(store: str | None, schema: str) -> Any:
    from .store.db import DatabaseUnavailable, open_database

    try:
        return open_database(_store_value(store), current_settings().home, schema=schema)
    except (DatabaseUnavailable, ValueError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None


_ORIGIN = re.compile(r"https?://[^/\s?#]+")


def _origins(values: tuple[str, ...]) -> tuple[str, ...]:
    """``--cors-origin`` values as a browser sends them in ``Origin`` (else none would match)."""
    for value in values:
        if value != "*" and not _ORIGIN.fullmatch(value):
            raise click.BadParameter(
                f"{value!r} is not a browser origin (scheme://host[:port], no path)",
                param_hint="'--cors-origin'",
            )
    return values


_STORE = click.option(
    "--store",
    default=None,
    help="postgresql://... for a fleet (several server processes); default: the configured "
    "store ($AGENT_SAGA_STORE, store in agent-saga.toml) when it is PostgreSQL, else SQLite "
    "in the home.",
)
_SCHEMA = click.option(
    "--store-schema",
    default="agent_saga_server",
    show_default=True,
    help="The PostgreSQL schema of the control plane's tables.",
)


@click.group(invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=PORT, help="0 picks a free port.")
@_STORE
@_SCHEMA
@click.option("--max-body-bytes", default=8 * 1024 * 1024, show_default=True,
              type=click.IntRange(1024, 1 << 30),
              help="Larger bodies are refused (413).")  # fmt: skip
@click.option("--cors-origin", multiple=True, callback=lambda _c, _p, v: _origins(v),
              help="A browser origin allowed to call the API (https://host[:port]).")  # fmt: skip
@click.option("--heartbeat", default=0.2, show_default=True, type=click.FloatRange(0.01, 0.5),
              help="Seconds between kill-switch messages on each agent's stream (an agent "
              "that hears nothing for a second refuses effects).")  # fmt: skip
@click.option("--max-wait", default=30.0, show_default=True, type=click.FloatRange(0, 30),
              help="The longest a long-poll (?wait=) is held, in seconds.")  # fmt: skip
@click.pass_context
def cloud_server(
    ctx: click.Context,
    host: str,
    port: int,
    store: str | None,
    store_schema: str,
    max_body_bytes: int,
    cors_origin: tuple[str, ...],
    heartbeat: float,
    max_wait: float,
) -> None:
    """The control plane for a fleet of agents (REST API under /v1, docs at /docs)."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = (store, store_schema)
        return
    settings = ServerSettings(
        max_body_bytes=max_body_bytes,
        cors_origins=cors_origin,
        heartbeat=heartbeat,
        max_wait=max_wait,
    )
    serve(host, port, store, store_schema, settings)


def serve(host: str, port: int, store: str | None, schema: str, settings: ServerSettings) -> None:
    """Bind, print the URL (and a first admin token), and serve until interrupted."""
    import uvicorn

    from .api.app import create_app
    from .store.tokens import first_admin

    db = _open(store, schema)
    try:
        sock, base = listen(host, port)
        lines = [f"agent-saga control plane on {base} ({db.kind}: {db.where})"]
        admin = first_admin(db)
        if admin is not None:
            lines.append(f"admin token (shown once, keep it safe): {admin}")
        lines.append(f"API docs: {base}/docs")
        print("\n".join(lines), flush=True)  # read by whoever started the server
        app = create_app(db, settings)
        # what exists now lives as long as the process: out of the collector's full passes,
        # which otherwise walk it all (about 120,000 objects, ~0.1 s) while a request waits
        gc.collect()
        gc.freeze()
        config = uvicorn.Config(
            app,
            log_level="warning",
            timeout_graceful_shutdown=2,
            access_log=False,
        )
        run_until_stopped(config, sock)
    finally:
        db.close()


@cloud_server.group()
def token() -> None:
    """Create, list and revoke tokens directly in the store."""


@token.command("create")
@click.option("--scope", required=True,
              type=click.Choice(["agent", "approver", "admin", "auditor"]))  # fmt: skip
@click.option("--subject", required=True, help="Who holds it (an approver's identity).")
@click.option("--origin", default=None, help="An agent's origin (default: the subject).")
@click.option("--expires-in", type=click.IntRange(1, 10 * 365 * 86400), default=None,
              help="Seconds until it expires (as the API: 1 to ten years).")  # fmt: skip
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the token to this file (mode 0600) instead of printing it.")  # fmt: skip
@click.pass_obj
def token_create(
    obj: tuple[str | None, str],
    scope: str,
    subject: str,
    origin: str | None,
    expires_in: int | None,
    out: Path | None,
) -> None:
    """Issue a token; it is shown (or written) once, and only its hash is kept."""
    import os
    import time

    from .store.control import audit
    from .store.tokens import issue

    # the file first: a token whose text could not be kept would be issued for nothing, and
    # an existing file may hold a token still in use
    fd = None if out is None else _create_private(out)
    try:
        db = _open(*obj)
        try:
            expires = None if expires_in is None else time.time() + expires_in
            with db.transaction() as tx:
                try:
                    text, info = issue(db, scope, subject, origin=origin, expires_at=expires,  # type: ignore[arg-type]
                                       tx=tx)  # fmt: skip
                except ValueError as exc:
                    raise click.ClickException(str(exc)) from None
                audit(tx, None, "token.create", {"id": info.id, "scope": scope, "subject": subject})
        finally:
            db.close()
    except BaseException:
        if out is not None and fd is not None:  # nothing was issued: the new file goes too
            os.close(fd)
            out.unlink(missing_ok=True)
        raise
    if out is None or fd is None:
        click.echo(text)
        return
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    click.echo(f"token {info.id} ({scope}, {subject}) written to {out}")


def _create_private(path: Path) -> int:
    """A new file at ``path`` (mode 0600), open for writing; never an existing one.

    Raises:
        click.ClickException: the file exists or cannot be made (one line, with the path).
    """
    import os

    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise click.ClickException(
            f"{path} exists: it may hold a token still in use; remove it or choose another --out"
        ) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror}") from None


@token.command("list")
@click.pass_obj
def token_list(obj: tuple[str | None, str]) -> None:
    """Every token: id, scope, subject, origin, state."""
    import time

    from .store.tokens import list_tokens

    db = _open(*obj)
    try:
        rows = list_tokens(db)
    finally:
        db.close()
    if not rows:
        click.echo("no tokens", err=True)  # on stderr: the list itself is empty
    now = time.time()
    for row in rows:
        state = "revoked" if row.revoked_at else "active"
        if row.revoked_at is None and row.expires_at is not None and row.expires_at <= now:
            state = "expired"
        click.echo(f"{row.id}  {row.scope:<8}  {row.subject}  {row.origin or '-'}  {state}")


@token.command("revoke")
@click.argument("token_id")
@click.pass_obj
def token_revoke(obj: tuple[str | None, str], token_id: str) -> None:
    """Revoke a token by its id."""
    from .store.control import audit
    from .store.tokens import revoke

    db = _open(*obj)
    try:
        with db.transaction() as tx:
            if not revoke(db, token_id, tx=tx):
                raise click.ClickException(f"no token {token_id}")
            audit(tx, None, "token.revoke", {"id": token_id})
    finally:
        db.close()
    click.echo(f"revoked {token_id}")


@cloud_server.group()
def passkeys() -> None:
    """Enrolment codes for approvers' passkeys; list and revoke passkeys."""


@passkeys.command("enrol")
@click.argument("subject")
@click.option("--expires-in", type=click.IntRange(60, 7 * 86400), default=900,
              show_default=True, help="Seconds until the code expires.")  # fmt: skip
@click.pass_obj
def passkeys_enrol(obj: tuple[str | None, str], subject: str, expires_in: int) -> None:
    """Print a one-time code that lets SUBJECT register a passkey on the dashboard (shown
    once; only its hash is kept; spent by the first passkey registered with it)."""
    import datetime

    from .dashboard.enrolment import issue_code
    from .dashboard.passkeys import create_tables
    from .store.control import audit
    from .store.tokens import NAME

    if not NAME.fullmatch(subject):  # as the API checks it: no token could ever name it
        raise click.BadParameter(
            f"must match {NAME.pattern}, got {subject!r}", param_hint="SUBJECT"
        )
    db = _open(*obj)
    try:
        create_tables(db)
        with db.transaction() as tx:
            try:
                issued = issue_code(tx, subject, "cli", float(expires_in))
            except ValueError as exc:
                raise click.ClickException(str(exc)) from None
            audit(tx, None, "passkey.enrolment", {
                "id": issued.id, "subject": subject, "expires_at": issued.expires_at,
            })  # fmt: skip
    finally:
        db.close()
    until = datetime.datetime.fromtimestamp(issued.expires_at).isoformat(timespec="seconds")
    click.echo(issued.code)
    click.echo(f"enrolment code for {subject}, valid until {until}, once", err=True)


@passkeys.command("list")
@click.option("--subject", default=None, help="Only this approver's passkeys.")
@click.pass_obj
def passkeys_list(obj: tuple[str | None, str], subject: str | None) -> None:
    """Registered passkeys: credential id, subject, when, signature count."""
    import datetime

    from .dashboard.enrolment import list_passkeys
    from .dashboard.passkeys import create_tables

    db = _open(*obj)
    try:
        create_tables(db)
        rows = list_passkeys(db, subject)
    finally:
        db.close()
    if not rows:
        click.echo("no passkeys" + (f" of {subject}" if subject else ""), err=True)
    for row in rows:
        when = datetime.datetime.fromtimestamp(row.created_at).isoformat(timespec="seconds")
        click.echo(f"{row.credential_id}  {row.subject}  {when}  used {row.sign_count}")


@passkeys.command("revoke")
@click.argument("credential_id")
@click.pass_obj
def passkeys_revoke(obj: tuple[str | None, str], credential_id: str) -> None:
    """Revoke a passkey by its credential id: its votes no longer verify."""
    from .dashboard.enrolment import revoke_passkey
    from .dashboard.passkeys import create_tables
    from .store.control import audit

    db = _open(*obj)
    try:
        create_tables(db)
        with db.transaction() as tx:
            subject = revoke_passkey(tx, credential_id)
            if subject is None:
                raise click.ClickException(f"no passkey {credential_id[:64]}")
            audit(tx, None, "passkey.revoke", {"credential": credential_id, "subject": subject})
    finally:
        db.close()
    click.echo(f"revoked passkey {credential_id[:16]}… of {subject}")


__all__ = ["cloud_server"]
