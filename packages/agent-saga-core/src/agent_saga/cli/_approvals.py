"""Approval commands: approvals, approve, deny, and the approver keys under ``keys``.

The CLI approver's identity is the operating-system account running the command
(``unix:<login>``), never a flag. With ``--sign``, the identity is the approver whose
registered public key matches the private key given, and the vote carries an Ed25519 signature
over the request, its step, its action digest and a fresh nonce.

Registering or revoking an approver key needs ``--sign`` with a trusted administrator key
(``admin_keys``) or the approver's current key; an attempt without that authority is refused
and logged as ``approver.key_refused`` (see :mod:`agent_saga._approvals.keys`).
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .._approvals.keys import KeyGrant, key_message
from .._approvals.request import (
    KEY_ADDED,
    KEY_REVOKED,
    ApprovalBook,
    ApprovalRequest,
    signing_message,
)
from .._approvals.votes import submit_vote
from .._log.admins import admin_id, trusted_admin_keys
from .._log.codec import JSONValue
from .._log.records import Entry, Kind
from .._log.store import LogStore
from ..proofs._note import NoteVerifier
from ..proofs._signing import PASSPHRASE_ENV, home_signer
from ._errors import EXIT_FAILED, BadInputError, CliError, one_line
from ._logfile import reading, require_home
from ._settings import current_settings


def cli_identity() -> str:
    """The approver id of whoever runs this command: their operating-system account."""
    return "unix:" + pwd.getpwuid(os.geteuid()).pw_name


@contextmanager
def _store(home: Path) -> Iterator[LogStore]:
    require_home(home)
    with current_settings().open_kit(checkpoints=False) as kit:
        yield kit.store


def _book(store: LogStore) -> ApprovalBook:
    return ApprovalBook().take_all(store.records())


def _show(request: ApprovalRequest, now: float) -> str:
    args = json.dumps(request.args, ensure_ascii=False, sort_keys=True)
    left = max(0, int(request.expires_at - now))
    return (
        f"{request.id}  {request.tool} ({request.semantics})  saga {request.saga} step "
        f"{request.ordinal}\n  arguments: {args}\n  digest: {request.digest}\n  why: "
        f"{request.rule}: {request.reason}\n  approvers: {', '.join(request.approvers)} "
        f"(quorum {request.quorum})  expires in {left}s"
    )


@click.command()
def approvals() -> None:
    """List pending approval requests, with the action shown in full (read-only)."""
    settings = current_settings()
    with reading(settings) as source:
        pending = ApprovalBook().take_all(source.records()).pending(time.time())
    if not pending:
        settings.console.print("no pending approvals")
        return
    now = time.time()
    for request in pending:
        settings.console.print(one_line(_show(request, now)).replace("\\x0a", "\n"), markup=False)


def _load_private(path: Path) -> Ed25519PrivateKey:
    passphrase = os.environ.get(PASSPHRASE_ENV)
    try:
        key = serialization.load_pem_private_key(
            path.read_bytes(), password=passphrase.encode() if passphrase else None
        )
    except (OSError, TypeError, ValueError) as exc:
        raise BadInputError(f"cannot load the private key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInputError(f"{path} is not an Ed25519 private key")
    return key


def _verifier_text(approver: str, public: Ed25519PublicKey) -> str:
    name = "approver/" + "".join(c if c.isalnum() or c in "-_.:" else "_" for c in approver)
    return NoteVerifier(name, public.public_bytes_raw()).encode()


def _vote(request_id: str, decision: str, note: str, sign: Path | None) -> None:
    settings = current_settings()
    with _store(settings.home) as store:
        book = _book(store)
        request = book.find(request_id)
        if request is None:
            raise BadInputError(f"no approval request {request_id!r}")
        signature = nonce = key_text = None
        approver = cli_identity()
        if sign is not None:
            private = _load_private(sign)
            public_raw = private.public_key().public_bytes_raw()
            owners = [
                (owner, key)
                for key, owner in book.keys.owners.items()
                if key not in book.keys.revoked and book.keys.keys[key].public_key == public_raw
            ]
            if not owners:
                raise CliError("this key is not registered (or was revoked): agent-saga keys add")
            approver, key_text = owners[0]
            nonce = secrets.token_hex(16)
            message = signing_message(
                request.id, request.saga, request.ordinal, request.digest, nonce, approver
            )
            signature = base64.b64encode(private.sign(message)).decode()
        result = submit_vote(
            store,
            request.id,
            approver,
            decision,
            channel="cli-signed" if sign else "cli",
            note=note,
            signature=signature,
            nonce=nonce,
            key=key_text,
        )
    if not result.accepted:
        settings.console.print(f"refused: {one_line(result.message)}", markup=False)
        raise SystemExit(EXIT_FAILED)
    settings.console.print(f"{decision} by {approver} recorded for {request.id}", markup=False)


@click.command()
@click.argument("request_id")
@click.option("--note", default="", help="Why (kept in the log).")
@click.option(
    "--sign",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Sign the approval with this Ed25519 private key (PEM) registered with 'keys add'.",
)
def approve(request_id: str, note: str, sign: Path | None) -> None:
    """Approve a pending request (as this OS account, or as the owner of --sign's key)."""
    _vote(request_id, "approve", note, sign)


@click.command()
@click.argument("request_id")
@click.option("--note", default="", help="Why (kept in the log).")
def deny(request_id: str, note: str) -> None:
    """Deny a pending request: the step is refused and its saga rolls back."""
    _vote(request_id, "deny", note, None)


def _read_public(path: Path, approver: str) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc}") from exc
    try:
        public = serialization.load_pem_public_key(raw)
    except ValueError:
        try:
            return NoteVerifier.parse(raw.decode()).encode()
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadInputError(f"{path} is neither a PEM nor a verifier public key") from exc
    if not isinstance(public, Ed25519PublicKey):
        raise BadInputError(f"{path} is not an Ed25519 public key")
    return _verifier_text(approver, public)


def _control(store: LogStore, kind: str, data: dict[str, JSONValue]) -> None:
    store.append([Entry(kind, None, data, int(time.time() * 1000))], sync=True)


SIGN_KEY_HELP = (
    "Sign with this Ed25519 private key (PEM): a trusted administrator key (admin_keys), or "
    "the approver's current registered key (to rotate or revoke it). Required."
)


_sign_option = click.option(
    "--sign", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=SIGN_KEY_HELP
)


def _grant(
    action: str, approver: str, key_text: str, sign: Path | None, book: ApprovalBook
) -> KeyGrant | str:
    """The authority for ``action`` on ``key_text``, signed with ``sign``; or why there is none."""
    if sign is None:
        return f"needs --sign: an administrator key (admin_keys) or {approver}'s current key"
    private = _load_private(sign)
    public = private.public_key().public_bytes_raw()
    current = [v.encode() for v in book.keys.active(approver) if v.public_key == public]
    if public in trusted_admin_keys():
        authority, signer = "admin", admin_id(public)
    elif current:
        authority, signer = "approver", current[0]
    else:
        return f"the --sign key is neither a trusted administrator key nor a key of {approver}"
    nonce = secrets.token_hex(16)
    message = key_message(action, approver, key_text, nonce, book.keys.log)
    signature = base64.b64encode(private.sign(message)).decode()
    grant = KeyGrant(authority, signer, nonce, signature)
    return book.keys.check(action, approver, key_text, grant.to_data()) or grant


def _change_key(
    store: LogStore, book: ApprovalBook, action: str, approver: str, key: str, sign: Path | None
) -> None:
    """Append the key record with its authority, or log the refusal and fail."""
    grant = _grant(action, approver, key, sign, book)
    data: dict[str, JSONValue] = {"approver": approver, "key": key, "by": cli_identity()}
    if isinstance(grant, str):
        _control(store, Kind.KEY_REFUSED, {**data, "action": action, "reason": grant})
        raise CliError(f"refused (logged): {grant}")
    _control(store, KEY_ADDED if action == "add" else KEY_REVOKED, {**data, **grant.to_data()})


@click.group(invoke_without_command=True)
@click.pass_context
def keys(ctx: click.Context) -> None:
    """The checkpoint public key (created on first use); approver keys: add, list, revoke, new."""
    if ctx.invoked_subcommand is not None:
        return
    settings = current_settings()
    require_home(settings.home)
    signer = home_signer(settings.home)
    settings.console.print(signer.verifier.encode(), markup=False, soft_wrap=True)


@keys.command(name="add")
@click.argument("approver")
@click.argument("public_key", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_sign_option
def keys_add(approver: str, public_key: Path, sign: Path | None) -> None:
    """Register an approver's Ed25519 public key (PEM or verifier key)."""
    settings = current_settings()
    key_text = _read_public(public_key, approver)
    with _store(settings.home) as store:
        _change_key(store, _book(store), "add", approver, key_text, sign)
    settings.console.print(f"registered for {approver}: {key_text}", markup=False, soft_wrap=True)


@keys.command(name="list")
def keys_list() -> None:
    """List registered approver keys (revoked ones marked) and key records that were ignored."""
    settings = current_settings()
    with _store(settings.home) as store:
        book = _book(store)
    if not book.keys.owners:
        settings.console.print("no approver keys registered")
    for key, owner in book.keys.owners.items():
        state = "REVOKED" if key in book.keys.revoked else "active"
        settings.console.print(f"{owner}  {state}  {key}", markup=False, soft_wrap=True)
    for seq, why in book.keys.refused:
        settings.console.print(f"IGNORED record {seq}: {one_line(why)}", markup=False)


@keys.command(name="revoke")
@click.argument("key")
@_sign_option
def keys_revoke(key: str, sign: Path | None) -> None:
    """Revoke a registered key (give the key text as listed); its signatures stop counting."""
    settings = current_settings()
    with _store(settings.home) as store:
        book = _book(store)
        if key not in book.keys.owners:
            raise BadInputError("no such registered key (see 'agent-saga keys list')")
        _change_key(store, book, "revoke", book.keys.owners[key], key, sign)
    settings.console.print(f"revoked: {key}", markup=False, soft_wrap=True)


@keys.command(name="new")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
def keys_new(out: Path) -> None:
    """Create an Ed25519 key pair for an approver: OUT (private, 0600) and OUT.pub (PEM)."""
    settings = current_settings()
    key = Ed25519PrivateKey.generate()
    passphrase = os.environ.get(PASSPHRASE_ENV)
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode())
        if passphrase
        else serialization.NoEncryption()
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise BadInputError(f"{out} exists; not overwriting a key") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    Path(f"{out}.pub").write_bytes(public)
    settings.console.print(f"wrote {out} (private) and {out}.pub", markup=False)


COMMANDS = (approvals, approve, deny, keys)
