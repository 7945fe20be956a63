"""Commands of offline mesh sagas: ``merge`` and ``sync``; what ``verify`` and ``certify`` do on
a mesh directory (``--home`` naming one).

``merge`` reads device homes and mesh directories and writes only the mesh given with
``--into``; ``sync`` runs on a device's home (it signs a checkpoint there and appends a
``mesh.seen`` record to its log), or, with ``--server``, ships the log to a control plane.
``sagas`` and ``replay`` read a mesh through
:class:`~agent_saga.proofs._mesh.source.MeshLogSource` (see :mod:`._logfile`).
"""

from __future__ import annotations

from pathlib import Path

import click

from .._config import find_config, read_token_file, server_token_file_setting
from ..proofs._mesh.conflicts import FleetBudget
from ..proofs._mesh.merge import merge_logs
from ..proofs._mesh.view import merged_view
from ..proofs._note import NoteVerifier
from ..proofs._signing import read_verifier
from ._errors import EXIT_FAILED, BadInputError, one_line
from ._settings import Settings, current_settings


def _trusted(keys: tuple[str, ...]) -> list[NoteVerifier] | None:
    if not keys:
        return None
    found: list[NoteVerifier] = []
    for given in keys:
        path = Path(given)
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else [given]
        found.extend(read_verifier(line) for line in lines if line.strip())
    return found


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--into",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The mesh directory to merge into (created if missing).",
)
@click.option(
    "--trust",
    "trust",
    multiple=True,
    help="Only accept origins with this verifier key (its text, or a file of keys; repeatable).",
)
def merge(sources: tuple[Path, ...], into: Path, trust: tuple[str, ...]) -> None:
    """Merge device logs (their homes) and mesh directories into the mesh INTO.

    Each origin's records count up to its latest checkpoint signed with its own key; anything
    else is rejected and listed with the reason (exit 1). Merging commutes, associates and is
    idempotent: any order of merges gives the same directory.
    """
    settings = current_settings()
    report = merge_logs(into, sources, key=settings.chain_key(), trusted=_trusted(trust))
    for origin in report.origins:
        forks = f", and {len(origin.forks)} other history(ies) it signed" if origin.forks else ""
        settings.console.print(f"{origin.name}: {origin.records} records{forks}", markup=False)
    for rejection in report.rejected:
        settings.console.print(f"REJECTED {one_line(str(rejection))}", markup=False)
    settings.console.print(
        f"merged into {into}: {len(report.origins)} origins, {report.added} new records, "
        f"{len(report.rejected)} rejected",
        markup=False,
    )
    if report.rejected:
        raise SystemExit(EXIT_FAILED)


@click.command()
@click.argument("mesh", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--server", help="Sync through this control plane's ingest instead of MESH.")
@click.option(
    "--token", help="The device's agent token for --server (visible to ps: prefer --token-file)."
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file (chmod 600) holding the agent token for --server.",
)
@click.option(
    "--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for --server."
)
def sync(
    mesh: Path | None,
    server: str | None,
    token: str | None,
    token_file: Path | None,
    timeout: float,
) -> None:
    """Sync this device (the home) with the mesh directory MESH, or with a control plane.

    Signs a checkpoint, then either merges this device's log into MESH and records in its log
    what it has now seen of the other origins, or (--server) ships the log and the checkpoint
    to the control plane's ingest and waits until it holds them all (exit 1 if it does not).
    A fleet halt (in the merged view, or on the server) engages this device's kill switch
    (released only by 'agent-saga resume').
    """
    if (mesh is None) == (server is None):
        raise BadInputError("give either a mesh directory or --server URL")
    if server is None and (token or token_file):
        raise BadInputError("--token and --token-file go with --server")
    settings = current_settings()
    if server is not None:
        _sync_server(settings, server, token, token_file, timeout)
        return
    assert mesh is not None
    with settings.open_kit() as kit:
        report = kit.sync(mesh)
    for rejection in report.merge.rejected:
        settings.console.print(f"REJECTED {one_line(str(rejection))}", markup=False)
    seen = ", ".join(f"{name}: {count}" for name, count in sorted(report.seen.items()))
    settings.console.print(f"synced with {mesh}; seen: {seen or 'no other origin'}", markup=False)
    if report.fleet_halt is not None:
        settings.console.print(
            f"fleet halted: {one_line(report.fleet_halt)}; this device is halted", markup=False
        )
    if report.merge.rejected:
        raise SystemExit(EXIT_FAILED)


def _sync_server(
    settings: Settings, server: str, token: str | None, token_file: Path | None, timeout: float
) -> None:
    if token is not None and token_file is not None:
        raise BadInputError("give --token or --token-file, not both")
    if token_file is not None:
        token = read_token_file(token_file)
    elif token is None and server_token_file_setting(find_config()) is None:
        raise BadInputError(
            "--server needs the agent's token: --token-file FILE (or $AGENT_SAGA_SERVER_TOKEN_FILE"
            " or server_token_file in agent-saga.toml)"
        )
    with settings.open_kit() as kit:
        report = kit.sync_server(server, token=token, timeout=timeout)
    if report.problem is None:
        settings.console.print(
            f"synced with {server} as origin {report.origin or '?'}: the server holds "
            f"{report.shipped} of {report.records} records, checkpoint of {report.checkpoint}",
            markup=False,
        )
    else:
        settings.console.print(f"NOT SYNCED {one_line(report.problem)}", markup=False)
    if report.fleet_halt is not None:
        settings.console.print(
            f"fleet halted: {one_line(report.fleet_halt)}; this device is halted", markup=False
        )
    if report.problem is not None:
        raise SystemExit(EXIT_FAILED)


def verify_mesh(settings: Settings) -> bool:
    """``verify`` on a mesh directory: every origin's chain and checkpoints, checked again."""
    view = merged_view(settings.home, key=settings.chain_key())
    for origin_id, name in sorted(view.origins.items(), key=lambda item: item[1]):
        settings.console.print(
            f"{name}: {view.sizes[origin_id]} records, chain and signed checkpoints verify",
            markup=False,
        )
    for fork in view.forks:
        settings.console.print(
            f"FORK {fork.origin}: {len(fork.sizes)} histories signed, agreeing on "
            f"{fork.common} records",
            markup=False,
        )
    for rejection in view.rejected:
        settings.console.print(f"REJECTED {one_line(str(rejection))}", markup=False)
    return not view.rejected and not view.forks


def fleet_budgets(texts: tuple[str, ...]) -> list[FleetBudget]:
    """``--budget`` values, parsed (a bad one is a usage error naming it)."""
    try:
        return [FleetBudget.parse(text) for text in texts]
    except ValueError as exc:
        raise BadInputError(f"--budget: {exc}") from None


COMMANDS = (merge, sync)
