"""The gateway's small parts on their own: where TOML keys are written, argument mappings, the
input-schema rule, the approval predicate, reading structured results, and reading and writing
JSON-RPC lines."""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

import pytest
from agent_saga import Allow, Deny, Semantics, ToolCall
from agent_saga_mcp import ArgumentMap, MappingError, Source, _wire
from agent_saga_mcp._pipes import ClientLines
from agent_saga_mcp._results import structured
from agent_saga_mcp._rules import Above, InputSchemaRule
from agent_saga_mcp._toml_lines import TomlLines, split_key
from mcp import types

DOC = '''\
# a comment
[gateway]
name = "g"

[upstreams."a.b"]
command = "x"
notes = """
[upstreams.fake]
"""
hide = [
  "one",
  'two',
]
tools.create.semantics = "reversible"

[[upstreams."a.b".tools.pay.rules]]
rule = "max_value"

[[ upstreams . 'a.b' . tools . pay . rules ]]  # the second rule
rule = "range"
'''


def test_split_key_reads_bare_quoted_and_dotted_keys() -> None:
    assert split_key('upstreams."a.b".tools') == ("upstreams", "a.b", "tools")
    assert split_key(" a . 'b c' ") == ("a", "b c")
    assert split_key('"esc\\"aped"') == ('esc"aped',)
    assert split_key("a..b") is None
    assert split_key("{ x") is None


def test_lines_of_tables_keys_arrays_of_tables_and_values() -> None:
    lines = TomlLines(DOC)
    assert lines.line_of(("gateway", "name")) == 3
    assert lines.line_of(("upstreams", "a.b")) == 5
    assert lines.line_of(("upstreams",)) == 5
    assert lines.line_of(("upstreams", "fake")) == 5  # inside a multi-line string: not a table
    assert lines.line_of(("upstreams", "a.b", "hide")) == 10
    assert lines.line_of(("upstreams", "a.b", "hide"), "two") == 12
    assert lines.line_of(("upstreams", "a.b", "tools", "create", "semantics")) == 14
    assert lines.line_of(("upstreams", "a.b", "tools", "pay", "rules", 0)) == 16
    assert lines.line_of(("upstreams", "a.b", "tools", "pay", "rules", 1, "rule")) == 20
    assert lines.line_of(("nowhere",)) is None


def test_sources_parse_and_resolve_or_say_what_is_missing() -> None:
    assert Source.parse("args.card.last4") == Source("args", ("card", "last4"))
    assert Source.parse("result") == Source("result")
    assert Source.parse("idempotency_key").resolve({}, None, "k-1") == "k-1"
    for bad in ("args", "closed", "result..x", "idempotency_key.x", 3):
        with pytest.raises(ValueError):  # noqa: PT011 - each message is checked in test_config
            Source.parse(bad)
    result = {"items": [{"id": "a"}, {"id": "b"}]}
    assert Source.parse("result.items.1.id").resolve({}, result, None) == "b"
    with pytest.raises(MappingError, match=r"result\.items\.2 is missing"):
        Source.parse("result.items.2.id").resolve({}, result, None)
    with pytest.raises(MappingError, match="the call's result was not recorded"):
        Source.parse("result.id").resolve({}, None, None)


def test_an_argument_map_builds_a_call_from_sources_and_constants() -> None:
    mapping = ArgumentMap(
        {"source": Source.parse("args.destination"), "key": Source.parse("idempotency_key")},
        {"overwrite": False},
    )
    built = mapping.build({"destination": "b.md", "source": "a.md"}, None, "as1-x/compensate")
    assert built == {"overwrite": False, "source": "b.md", "key": "as1-x/compensate"}
    with pytest.raises(MappingError, match=r"argument 'source' from args\.destination"):
        mapping.build({}, None, "k")


def _call(tool: str, args: dict[str, object]) -> ToolCall:
    return ToolCall(tool, Semantics.COMPENSABLE, args, "saga", 1, None, lambda k, d: None)


def test_the_input_schema_rule_refuses_arguments_the_upstream_would_reject() -> None:
    schema = {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "idempotency_key": {"type": "string"},
            "ref": {"type": "string"},
        },
        "required": ["amount", "idempotency_key", "ref"],
    }
    rule = InputSchemaRule({"charge": schema, "broken": {"type": 5}}, {"charge": {"ref"}})
    assert rule.evaluate(_call("charge", {"amount": 5})) == Allow()  # the gateway fills the keys
    refused = rule.evaluate(_call("charge", {"amount": "5", "extra": 1}))
    assert refused == Deny("input_schema", "amount: '5' is not of type 'number'")
    assert rule.evaluate(_call("broken", {"anything": 1})) == Allow()  # not valid JSON Schema
    assert rule.evaluate(_call("unknown", {})) == Allow()
    assert rule.describe() == "arguments match the inputSchema of 1 upstream tool(s)"


def test_the_compiled_schema_check_admits_only_what_jsonschema_admits() -> None:
    schema = {
        "type": "object",
        "properties": {
            "amount": {"type": "number", "minimum": 0},
            "email": {"type": "string", "format": "email"},  # formats are not asserted
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        },
        "required": ["amount"],
        "additionalProperties": False,
    }
    remote = {"type": "object", "properties": {"x": {"$ref": "https://example.invalid/x.json"}}}
    rule = InputSchemaRule({"charge": schema, "remote": remote}, {})
    assert set(rule._fast) == {"charge"}  # a reference it would have to fetch: not compiled
    cases: list[tuple[dict[str, object], str | None]] = [
        ({"amount": 5}, None),
        ({"amount": 10**30, "email": "not an address"}, None),  # too big for the compiled check
        ({"amount": 2.5, "tags": ["a", "b"]}, None),
        ({"amount": -1}, "amount: -1 is less than the minimum of 0"),
        ({"amount": True}, "amount: True is not of type 'number'"),
        ({"amount": 1, "tags": ["a", 2]}, "tags.1: 2 is not of type 'string'"),
        ({"amount": 1, "other": 1}, "arguments: Additional properties are not allowed"),
        ({}, "arguments: 'amount' is a required property"),
    ]
    for arguments, refusal in cases:
        decision = rule.evaluate(_call("charge", arguments))
        if refusal is None:
            assert decision == Allow(), arguments
        else:
            assert isinstance(decision, Deny), arguments
            assert decision.reason.startswith(refusal), (arguments, decision.reason)


def test_approval_above_a_bound_also_asks_when_the_value_cannot_be_compared() -> None:
    above = Above("amount", 100)
    assert above(_call("t", {"amount": 100})) is False
    assert above(_call("t", {"amount": 100.5})) is True
    assert above(_call("t", {"amount": "lots"})) is True
    assert above(_call("t", {})) is True
    assert above(_call("t", {"amount": float("nan")})) is True


def test_a_result_is_structured_content_else_the_json_its_text_holds() -> None:
    text = types.TextContent(type="text", text='{"number": 3}')
    assert structured(types.CallToolResult(content=[text])) == {"number": 3}
    both = types.CallToolResult(content=[text], structured_content={"number": 4})
    assert structured(both) == {"number": 4}
    prose = types.TextContent(type="text", text="Created issue 3")
    assert structured(types.CallToolResult(content=[prose])) is None
    assert structured(types.CallToolResult(content=[text, prose])) is None


def test_a_step_runs_in_the_saga_context_in_the_calling_task_and_can_be_cancelled() -> None:
    import asyncio
    import contextvars

    from agent_saga_mcp._session import _InContext

    which: contextvars.ContextVar[str] = contextvars.ContextVar("which", default="caller")
    context = contextvars.Context()
    context.run(which.set, "saga")
    seen: list[object] = []

    async def step(wait: float) -> str:
        seen.append((which.get(), asyncio.current_task()))
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            seen.append("cancelled inside the step")
            raise
        which.set("after the step")  # lands in the saga's context, as in a task made in it
        return "done"

    async def main() -> None:
        assert await _InContext(step(0), context) == "done"
        assert seen == [("saga", asyncio.current_task())]
        assert (which.get(), context.run(which.get)) == ("caller", "after the step")
        task = asyncio.get_running_loop().create_task(
            _call_cancelled(_InContext(step(30), context))
        )
        await asyncio.sleep(0.05)
        task.cancel()
        assert await task == "cancelled"
        assert seen[-1] == "cancelled inside the step"

    async def _call_cancelled(awaitable: _InContext[str]) -> str:
        try:
            await awaitable
        except asyncio.CancelledError:
            return "cancelled"
        return "not cancelled"

    asyncio.run(main())


def test_the_compiled_check_admits_no_decimal_multiple_jsonschema_refuses() -> None:
    """Its docstring: a refusal is always jsonschema's. jsonschema's float ``multipleOf``
    refuses 0.07 for 0.01 (binary rounding); the compiled check must not admit it instead."""
    import jsonschema  # type: ignore[import-untyped]

    schema = {"type": "object", "properties": {"a": {"type": "number", "multipleOf": 0.01}}}
    assert not jsonschema.Draft202012Validator(schema).is_valid({"a": 0.07})
    decision = InputSchemaRule({"pay": schema}, {}).evaluate(_call("pay", {"a": 0.07}))
    assert isinstance(decision, Deny), decision


WIRE_LINES = [
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}',
    b'{"a":1,"a":2}',
    b'{"big":123456789012345678901234567890,"neg":-9223372036854775809}',
    b'{"u64":18446744073709551615,"i64":-9223372036854775808,"d18":123456789012345678}',
    b'{"over":18446744073709551616,"in_text":"12345678901234567890","f":1234567890123456789.5}',
    b'\xef\xbb\xbf{"bom":true}',
    b'{"e":"\\u00e9\\ud83d\\ude00","f":0.1,"g":-0,"h":1E5}',
    b"[" * 5000 + b"]" * 5000,
]
WIRE_REFUSED = [b'{"a":1}garbage', b"[1,]", b'{"a":01}', b'"\xff"', b'"a\x01b"', b""]


@pytest.mark.parametrize("line", WIRE_LINES)
def test_a_line_is_read_as_json_reads_it(line: bytes) -> None:
    try:
        expected: object = json.loads(line)
    except RecursionError:
        with pytest.raises(RecursionError):
            _wire.decode(line)
        return
    got = _wire.decode(line)
    assert repr(got) == repr(expected)  # NaN != NaN; the reprs tell ints from floats too


WIRE_NOT_JSON = [b'{"x":NaN}', b"[Infinity]", b"-Infinity", b'{"z":1e400}', b'["\\ud800"]']


@pytest.mark.parametrize("line", WIRE_NOT_JSON)
def test_a_value_json_has_no_place_for_is_refused_though_json_reads_it(line: bytes) -> None:
    json.loads(line)  # Python's json extends JSON with these
    with pytest.raises(_wire.NotJSONValue, match="is not"):
        _wire.decode(line)
    assert _wire.decode_lenient(line) is not None


@pytest.mark.parametrize("line", WIRE_REFUSED)
def test_a_line_json_refuses_is_refused_with_its_error(line: bytes) -> None:
    with pytest.raises(ValueError, match=r".") as expected:
        json.loads(line)
    with pytest.raises(ValueError, match=r".") as got:
        _wire.decode(line)
    assert str(got.value) == str(expected.value)


def test_a_message_is_written_as_compact_utf8_json_on_one_line() -> None:
    message = {"jsonrpc": "2.0", "id": 7, "result": {"text": "é 😀\n", "n": [1, 2.5, None]}}
    line = _wire.encode(message)
    assert line == json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    huge: dict[Any, Any] = {"id": 2**70, 3: "int key"}
    assert _wire.encode(huge) == b'{"id":1180591620717411303424,"3":"int key"}\n'
    assert _wire.encode({"x": float("nan")}) == b'{"x":null}\n'  # as the SDK's pydantic writes it
    assert _wire.encode({"m": "a\ud800"}) == b'{"m":"a\\ud800"}\n'  # no UTF-8 form: escaped


def test_lines_split_as_they_arrive_are_the_lines_a_stream_reader_reads() -> None:
    rnd = random.Random(23)
    pieces = [b"\n", b"ab", b"c", b"0123456789abcdef", b"x" * 30]

    async def read(chunks: list[bytes], limit: int) -> list[bytes | _wire.Oversized]:
        stream = asyncio.StreamReader(limit=limit)
        for chunk in chunks:
            stream.feed_data(chunk)
        stream.feed_eof()
        reader, lines = _wire.LineReader(stream, limit), []
        while (line := await reader.next()) is not None:
            lines.append(line)
        return lines

    async def compare() -> int:
        oversized = 0
        for _ in range(400):
            limit = rnd.randint(1, 12)
            data = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 12)))
            cuts = sorted(rnd.sample(range(len(data) + 1), min(len(data) + 1, rnd.randint(0, 5))))
            chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
            splitter = _wire.LineSplitter(limit)
            split = [line for chunk in chunks if chunk for line in splitter.feed(chunk)]
            tail = splitter.end()
            split += [tail] if tail is not None else []
            assert split == await read([c for c in chunks if c], limit), (limit, chunks)
            oversized += sum(isinstance(line, _wire.Oversized) for line in split)
        return oversized

    assert asyncio.run(compare()) > 50  # lines over the limit were among those compared


def test_a_sink_that_pauses_gets_no_more_lines_until_it_resumes() -> None:
    """The relay pauses the client's input when its answers are not read (``"drain"``). The
    lines already read in the same chunk must wait too: each of them could be a ``tools/list``
    answered with the whole catalog, so handing them over would buffer chunk-size times the
    catalog's size for a client that reads nothing."""

    async def scenario() -> tuple[list[bytes | None], list[bytes | None], list[bytes | None]]:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        reader = os.fdopen(read_fd, "rb", buffering=0)
        transport, lines = await loop.connect_read_pipe(lambda: ClientLines(1024), reader)
        got: list[bytes | None] = []

        def sink(line: Any) -> None:
            got.append(line)
            if len(got) % 3 == 1:
                lines.pause("drain")  # as the relay does when its answers pile up

        lines.attach(sink)
        os.write(write_fd, b"".join(b"%d\n" % n for n in range(10)))
        os.close(write_fd)
        await asyncio.sleep(0.2)
        first = list(got)
        lines.resume("drain")
        second = list(got)
        for _ in range(10):
            lines.resume("drain")
        await asyncio.sleep(0.2)
        transport.close()
        return first, second, got

    first, second, everything = asyncio.run(scenario())
    assert first == [b"0\n"]
    assert second == [b"0\n", b"1\n", b"2\n", b"3\n"]
    assert everything == [b"%d\n" % n for n in range(10)] + [None]


RESULTS: list[dict[str, Any]] = [
    {"content": [{"type": "text", "text": "a"}], "isError": False, "structuredContent": {"k": 1}},
    {"content": [{"type": "text", "text": "a", "annotations": {"priority": 0.5}, "_meta": {}}]},
    {"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "", "mimeType": "x"}]},
    {"content": [], "_meta": {"m": 1}},
    {"content": [{"type": "text", "text": "a", "extra": 1}], "isError": True},
]
RESULTS_REFUSED: list[dict[str, Any]] = [
    {"content": [{"type": "text"}]},
    {"content": [{"type": "text", "text": 5}]},
    {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": None}]},
    {"content": [{"type": "text", "text": "a"}], "isError": "maybe"},
    {"content": "text"},
]


@pytest.mark.parametrize("raw", RESULTS)
def test_a_relayed_result_is_the_model_the_sdk_validates(raw: dict[str, Any]) -> None:
    from agent_saga_mcp._link import RelayedResult

    expected = types.CallToolResult.model_validate(raw, by_name=False)
    got = RelayedResult.of(raw, "v")
    assert got.model_dump() == expected.model_dump()
    assert got.model_fields_set == expected.model_fields_set
    assert [type(block) for block in got.content] == [type(block) for block in expected.content]
    assert got.raw is raw
    assert got.version == "v"


@pytest.mark.parametrize("raw", RESULTS_REFUSED)
def test_a_malformed_result_is_refused_with_the_sdks_error(raw: dict[str, Any]) -> None:
    from agent_saga_mcp._link import RelayedResult
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as expected:
        types.CallToolResult.model_validate(raw, by_name=False)
    with pytest.raises(ValidationError) as got:
        RelayedResult.of(raw, "v")
    assert got.value.errors() == expected.value.errors()
