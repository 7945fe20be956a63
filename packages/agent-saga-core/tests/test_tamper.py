"""The tamper matrix: every way of editing the log is caught by `agent-saga verify`.

The chain alone catches a modified, deleted, inserted, swapped or duplicated record. A truncated
tail and a log rewritten from record k (by someone who recomputes every hash) leave a valid
chain: the synced watermark (``log.synced``) catches a log that became shorter while it is
intact, and a checkpoint catches both, which the tests also show by checking without them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_saga import AgentKit, Entry, SequentialIds, compensator, tool
from agent_saga._log.chain import Chain
from agent_saga.cli import main
from click.testing import CliRunner, Result

Lines = list[bytes]


@compensator("tamper.refund")
def refund(result: str) -> None:
    return None


@tool(compensate="tamper.refund")
def charge(cents: int) -> str:
    return f"ch_{cents}"


@tool(semantics="reversible")
def draft(text: str) -> str:
    return text


def verify(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), "verify", *args])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with four sagas (14+ records) and a checkpoint over all of them."""
    home = tmp_path_factory.mktemp("pristine") / "home"
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        for i in range(4):
            try:
                with kit.transaction(f"order-{i}"):
                    charge(100 + i)
                    draft(f"receipt {i}")
                    if i % 2:
                        raise RuntimeError("card declined")
            except Exception:
                continue
    return home


def lines_of(home: Path) -> Lines:
    raw = (home / "log.jsonl").read_bytes().rstrip(b"\x00")
    return raw.splitlines(keepends=True)


def write(home: Path, lines: Lines) -> None:
    (home / "log.jsonl").write_bytes(b"".join(lines))


def modify(lines: Lines) -> Lines:
    index = next(i for i, line in enumerate(lines) if b'"cents":101' in line)
    lines[index] = lines[index].replace(b'"cents":101', b'"cents":901', 1)
    return lines


def delete(lines: Lines) -> Lines:
    return lines[:6] + lines[7:]


def insert(lines: Lines) -> Lines:
    return [*lines[:6], lines[2], *lines[6:]]


def swap(lines: Lines) -> Lines:
    lines[6], lines[7] = lines[7], lines[6]
    return lines


def duplicate(lines: Lines) -> Lines:
    return [*lines[:7], lines[6], *lines[7:]]


def truncate_at_boundary(lines: Lines) -> Lines:
    return lines[:-3]


def truncate_inside_a_record(lines: Lines) -> Lines:
    return [*lines[:-1], lines[-1][: len(lines[-1]) // 2]]


def reseal(lines: Lines, first: int, edit: Callable[[dict[str, object]], None]) -> Lines:
    """Rewrite every record from index ``first`` with recomputed, valid hashes."""
    from agent_saga._log.codec import decode

    chain = Chain()
    out = lines[:first]
    prev = decode(lines[first - 1])["hash"] if first else "0" * 64
    for seq, line in enumerate(lines[first:], start=first + 1):
        obj = decode(line)
        data = dict(obj["data"])
        edit(data)
        entry = Entry(obj["kind"], obj["saga"], data, obj["ts"])
        record, stored = chain.seal(entry, seq, prev)
        out.append(stored)
        prev = record.hash
    return out


def hide_the_refunds(data: dict[str, object]) -> None:
    """Make every charge look like one cent."""
    args = data.get("args")
    if str(data.get("tool", "")).endswith("charge") and isinstance(args, dict):
        data["args"] = {**args, "cents": 1}


def rewrite_from_k(lines: Lines) -> Lines:
    rewritten = reseal(lines, 4, hide_the_refunds)
    assert rewritten[4:] != lines[4:]
    return rewritten


CHAIN_CATCHES = [modify, delete, insert, swap, duplicate]
CHECKPOINT_CATCHES = [truncate_at_boundary, truncate_inside_a_record, rewrite_from_k]


@pytest.fixture
def copy(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(pristine, target)
    return target


def test_the_untouched_log_verifies_against_its_checkpoint(copy: Path) -> None:
    result = verify(copy)
    assert result.exit_code == 0, result.output
    assert "consistent with the latest checkpoint" in result.output


@pytest.mark.parametrize("tamper", CHAIN_CATCHES + CHECKPOINT_CATCHES, ids=lambda f: f.__name__)
def test_verify_with_a_checkpoint_catches_every_tamper(
    copy: Path, tamper: Callable[[Lines], Lines]
) -> None:
    write(copy, tamper(lines_of(copy)))
    result = verify(copy)
    assert result.exit_code == 1, result.output
    assert "BROKEN" in result.output or "truncated" in result.output or "rewritten" in result.output


@pytest.mark.parametrize("tamper", CHAIN_CATCHES, ids=lambda f: f.__name__)
def test_the_chain_alone_catches_edits_inside_the_log(
    copy: Path, tamper: Callable[[Lines], Lines]
) -> None:
    shutil.rmtree(copy / "checkpoints")
    write(copy, tamper(lines_of(copy)))
    result = verify(copy)
    assert result.exit_code == 1
    assert "log BROKEN" in result.output


def test_without_a_checkpoint_the_watermark_catches_a_truncated_tail(copy: Path) -> None:
    shutil.rmtree(copy / "checkpoints")
    write(copy, truncate_at_boundary(lines_of(copy)))
    result = verify(copy)
    assert result.exit_code == 1, result.output
    assert "records were removed" in result.output


def test_without_a_checkpoint_or_watermark_truncation_and_rewrites_go_unseen(copy: Path) -> None:
    """Why checkpoints exist: these two leave a valid chain behind, and whoever can write the
    log can also remove the watermark beside it."""
    shutil.rmtree(copy / "checkpoints")
    (copy / "log.synced").unlink()
    original = lines_of(copy)
    for tamper in (truncate_at_boundary, rewrite_from_k):
        write(copy, tamper(list(original)))
        result = verify(copy)
        assert result.exit_code == 0, result.output
        assert "no earlier checkpoint" in result.output


def test_an_attacker_who_replaces_key_and_checkpoint_is_caught_by_a_saved_checkpoint(
    copy: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "saved.note"
    shutil.copy(copy / "checkpoints" / "latest.note", saved)
    public_key = (copy / "keys" / "checkpoint.pub").read_text()
    # The attacker rewrites the log, then makes the home consistent with it again.
    write(copy, reseal(lines_of(copy), 1, hide_the_refunds))
    shutil.rmtree(copy / "checkpoints")
    shutil.rmtree(copy / "keys")
    (copy / "log.synced").unlink()
    assert CliRunner().invoke(main, ["--home", str(copy), "checkpoint"]).exit_code == 0
    assert verify(copy).exit_code == 0  # the home alone now vouches for the forgery
    result = verify(copy, "--since", str(saved), "--key", public_key.strip())
    assert result.exit_code == 1
    assert "INCONSISTENT" in result.output
    assert "rewritten" in result.output
    assert "latest checkpoint rejected" in result.output  # the forger's key is not trusted


# -- the "Log and proofs" failure modes -------------------------------------------------------


def test_deleting_the_final_record_is_caught(copy: Path) -> None:
    write(copy, lines_of(copy)[:-1])
    result = verify(copy)
    assert result.exit_code == 1
    assert "truncated" in result.output


def test_an_edited_final_record_with_its_hash_stripped_is_caught(copy: Path) -> None:
    lines = lines_of(copy)
    from agent_saga._log.codec import canonical, decode

    last = decode(lines[-1])
    del last["hash"]
    last["data"] = {"status": "committed"}
    lines[-1] = canonical(last) + b"\n"
    write(copy, lines)
    result = verify(copy)
    assert result.exit_code == 1
    assert "log BROKEN" in result.output


def test_a_deleted_record_covered_by_a_forged_gap_record_is_caught(copy: Path) -> None:
    from agent_saga._log.codec import decode

    lines = lines_of(copy)
    victim = decode(lines[6])
    forged = Entry("gap", victim["saga"], {"note": "nothing happened here"}, victim["ts"])
    _, line = Chain().seal(forged, victim["seq"], victim["prev"])
    lines[6] = line
    write(copy, lines)
    result = verify(copy)
    assert result.exit_code == 1
    assert "log BROKEN" in result.output
    assert "seq 8" in result.output  # the record after the forgery no longer chains


def test_a_full_restamp_is_caught_by_the_checkpoint(copy: Path) -> None:
    write(copy, reseal(lines_of(copy), 0, hide_the_refunds))
    result = verify(copy)
    assert result.exit_code == 1
    assert "rewritten" in result.output
