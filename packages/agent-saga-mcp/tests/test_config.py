"""Reading the gateway's configuration: every mistake is one line naming the file and the line
where the mistake is written, whether it is found when reading the file or when the declarations
meet the upstreams' tool lists (here given as the ``Tool`` objects an upstream lists)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, CompensatorRegistry, RefusedCall
from agent_saga_mcp import ConfigError, build_routes, load_config
from agent_saga_mcp._gateway import guards_for
from agent_saga_mcp._saga_tools import NAMES
from mcp import types
from mcp_testkit import run_cli

HEAD = """\
[upstreams.issues]
command = "issues-server"
"""


def _tool(
    name: str, props: dict[str, Any], required: list[str] | None = None, out: Any = None
) -> types.Tool:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return types.Tool(name=name, description=f"{name} tool", input_schema=schema, output_schema=out)


ISSUES = [
    _tool(
        "create_issue",
        {"title": {"type": "string"}, "meta": {"type": "object", "properties": {"x": {}}}},
        ["title"],
        {"type": "object", "properties": {"number": {"type": "integer"}}},
    ),
    _tool("close_issue", {"number": {"type": "integer"}, "reason": {"type": "string"}}, ["number"]),
    _tool("find_issue", {"title": {"type": "string"}}, ["title"]),
    _tool("charge", {"amount": {"type": "number"}, "card": {"type": "object"}, "key": {}}),
    _tool("delete_repo", {}),
]


def _load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return load_config(path)


def _error(tmp_path: Path, text: str, catalog: list[types.Tool] | None = None) -> tuple[int, str]:
    """The line and message of the error reading ``text`` (then routing it over ``catalog``)."""
    with pytest.raises(ConfigError) as caught:
        config = _load(tmp_path, text)
        build_routes(config, {"issues": catalog if catalog is not None else ISSUES}, NAMES)
    error = caught.value
    assert error.file == tmp_path / "gateway.toml"
    assert error.line is not None
    assert str(error) == f"{tmp_path / 'gateway.toml'}:{error.line}: {error.message}"
    assert "\n" not in str(error)
    return error.line, error.message


def test_a_valid_configuration_reads_into_declarations(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        HEAD
        + """prefix = "gh_"
hide = ["delete_repo"]

[upstreams.issues.tools.create_issue.compensate]
tool = "close_issue"
arguments = { number = "result.number" }
constants = { reason = "undo" }

[[upstreams.issues.tools.charge.rules]]
rule = "range"
path = "amount"
low = 1
high = 50
""",
    )
    routes = build_routes(config, {"issues": ISSUES}, NAMES)
    assert sorted(routes) == ["gh_charge", "gh_close_issue", "gh_create_issue", "gh_find_issue"]
    create = routes["gh_create_issue"]
    assert create.definition.name == "gh_create_issue"
    assert create.definition.input_schema == ISSUES[0].input_schema
    assert create.decl is not None
    assert create.decl.compensate is not None
    assert create.decl.compensate.arguments.build({}, {"number": 4}, None) == {
        "number": 4,
        "reason": "undo",
    }
    assert (
        config.compensator_name("issues", "create_issue")
        == "mcp:agent-saga-mcp/issues/create_issue"
    )
    assert [r.kind for r in config.upstreams["issues"].tools["charge"].rules] == ["range"]


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        (
            '[upstreams.issues.tools.create_issue]\nsemantic = "reversible"\n',
            4,
            "upstreams.issues.tools.create_issue.semantic: unknown setting 'semantic' "
            "(did you mean 'semantics'?); known: compensate, idempotency_key, probe, redact, "
            "rules, semantics",
        ),
        (
            'hide = "delete_repo"\n',
            3,
            "upstreams.issues.hide: 'hide' must be a list, got 'delete_repo'",
        ),
        (
            '[upstreams.issues.tools.create_issue]\nsemantics = "undoable"\n',
            4,
            "upstreams.issues.tools.create_issue.semantics: semantics is one of reversible, "
            "compensable, irreversible",
        ),
        (
            '[upstreams.issues.tools.create_issue]\nsemantics = "compensable"\n',
            3,
            "upstreams.issues.tools.create_issue: a COMPENSABLE tool needs compensate= "
            "(a registered name or callable)",
        ),
        (
            '[upstreams.issues.tools.find_issue]\nsemantics = "reversible"\n'
            'probe = { tool = "find_issue", arguments = {}, landed = "result.found" }\n',
            3,
            "upstreams.issues.tools.find_issue: a REVERSIBLE tool needs no probe: its effect is "
            "local",
        ),
        (
            "[upstreams.issues.tools.create_issue.compensate]\n"
            'tool = "close_issue"\narguments = { number = "reslt.number" }\n',
            5,
            "upstreams.issues.tools.create_issue.compensate.arguments.number: 'reslt.number' "
            "must start with 'args.', 'result' or be 'idempotency_key' (put literal values "
            "under 'constants')",
        ),
        (
            "[upstreams.issues.tools.charge]\n\n[[upstreams.issues.tools.charge.rules]]\n"
            'rule = "max_value"\npath = "amount"\nlimit = 5\n\n'
            '[[upstreams.issues.tools.charge.rules]]\nrule = "range"\npath = "amount"\n',
            10,
            "upstreams.issues.tools.charge.rules: range: Range needs a low or a high bound",
        ),
        (
            '[[upstreams.issues.tools.charge.rules]]\nrule = "ceiling"\n',
            4,
            "upstreams.issues.tools.charge.rules.rule: 'rule' is one of range, max_value, "
            "allow_values, deny_values, rate_limit, require_approval, budget; got 'ceiling'",
        ),
        (
            'url = "http://127.0.0.1:1/mcp"\n',
            1,
            "upstreams.issues: give exactly one of 'command' (a stdio server) or 'url' "
            "(streamable HTTP)",
        ),
    ],
)
def test_a_mistake_in_the_file_is_reported_at_its_line(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    assert _error(tmp_path, HEAD + body) == (line, message)


def test_toml_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, HEAD + "hide = delete_repo\n")
    assert caught.value.line == 3
    assert caught.value.message.startswith("not valid TOML: Invalid value (at line 3")


def test_a_configuration_without_upstreams_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="declare at least one upstream"):
        _load(tmp_path, '[gateway]\nname = "g"\n')


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        (
            "[upstreams.issues.tools.create_isue]\n",
            3,
            "upstreams.issues.tools.create_isue: no such tool on this upstream (charge, "
            "close_issue, create_issue, delete_repo, find_issue)",
        ),
        (
            'hide = [\n  "delete_repo",\n  "drop_table",\n]\n',
            5,
            "upstreams.issues.hide: no tool 'drop_table' on this upstream (it offers: charge, "
            "close_issue, create_issue, delete_repo, find_issue)",
        ),
        (
            "[upstreams.issues.tools.create_issue.compensate]\n"
            'tool = "reopen"\narguments = { number = "result.number" }\n',
            4,
            "upstreams.issues.tools.create_issue: compensate: no tool 'reopen' on this upstream "
            "(charge, close_issue, create_issue, delete_repo, find_issue)",
        ),
        (
            "[upstreams.issues.tools.create_issue.compensate]\n"
            'tool = "close_issue"\narguments = { number = "result.number", why = "args.title" }\n',
            5,
            "upstreams.issues.tools.create_issue: compensate (close_issue): no field 'why' "
            "(fields: number, reason)",
        ),
        (
            "[upstreams.issues.tools.create_issue.compensate]\n"
            'tool = "close_issue"\nconstants = { reason = "undo" }\n',
            3,
            "upstreams.issues.tools.create_issue: compensate: close_issue requires number; map "
            "or set each (arguments = {...} or constants = {...})",
        ),
        (
            "[upstreams.issues.tools.create_issue.compensate]\n"
            'tool = "close_issue"\narguments = { number = "result.nmber" }\n',
            5,
            "upstreams.issues.tools.create_issue: compensate: result.nmber: no field 'nmber' "
            "(fields: number) in the output schema of create_issue",
        ),
        (
            "[upstreams.issues.tools.create_issue.compensate]\n"
            'tool = "close_issue"\narguments = { number = "args.meta.y" }\n',
            5,
            "upstreams.issues.tools.create_issue: compensate: args.meta.y: no field 'meta.y' "
            "(fields: x)",
        ),
        (
            '[[upstreams.issues.tools.charge.rules]]\nrule = "max_value"\npath = "total"\n'
            "limit = 5\n",
            3,
            "upstreams.issues.tools.charge: max_value: no field 'total' (fields: amount, card, "
            "key)",
        ),
        (
            '[upstreams.issues.tools.charge]\nidempotency_key = "request_id"\n',
            4,
            "upstreams.issues.tools.charge: idempotency_key: no field 'request_id' (fields: "
            "amount, card, key)",
        ),
        (
            '[upstreams.issues.tools.charge]\nredact = ["cvv"]\n',
            4,
            "upstreams.issues.tools.charge: redact 'cvv': no field 'cvv' (fields: amount, card, "
            "key)",
        ),
        (
            '[upstreams.issues.tools.charge]\nredact = ["card.cvv"]\n'
            '[upstreams.issues.tools.charge.compensate]\ntool = "close_issue"\n'
            'arguments = { number = "args.card" }\n',
            7,
            "upstreams.issues.tools.charge: compensate: args.card is redacted ('card.cvv'): "
            "never stored, recovery could not use it",
        ),
        (
            '[upstreams.issues.tools.charge.probe]\ntool = "find_issue"\n'
            'arguments = { titel = "args.card" }\nlanded = "result.found"\n',
            5,
            "upstreams.issues.tools.charge: probe (find_issue): no field 'titel' (fields: title)",
        ),
    ],
)
def test_a_declaration_that_does_not_fit_the_upstream_is_reported_at_its_line(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    assert _error(tmp_path, HEAD + body) == (line, message)


def test_exposed_names_may_not_collide(tmp_path: Path) -> None:
    catalog = [*ISSUES, _tool("saga_begin", {})]
    line, message = _error(tmp_path, HEAD, catalog)
    assert (line, message) == (
        1,
        "upstreams.issues: tool 'saga_begin' is also offered by the gateway's own saga tools; "
        "set a 'prefix' for one of them",
    )


def test_redacted_paths_are_masked_before_the_gateway_logs_a_call(tmp_path: Path) -> None:
    config = _load(tmp_path, HEAD + '[upstreams.issues.tools.charge]\nredact = ["card.cvv"]\n')
    routes = build_routes(config, {"issues": ISSUES}, NAMES)

    class NoUpstream:
        async def call(self, upstream: str, tool: str, arguments: Any) -> types.CallToolResult:
            raise AssertionError("not called")

    guards = guards_for(config, routes, NoUpstream(), CompensatorRegistry())
    assert guards["charge"].spec.redact == (("card", "cvv"),)
    sent: list[Any] = []
    arguments = {"amount": 5, "card": {"cvv": "cvv-321", "number": "4111"}, "key": "k"}
    with AgentKit(home=tmp_path / "home") as kit:
        with kit.transaction():  # IRREVERSIBLE without approvers: refused, and logged
            out = guards["charge"].run(arguments, sent.append)
        assert isinstance(out, RefusedCall)
        records = list(kit.store.records())
    [refused] = [r.data for r in records if r.kind == "gate.refused"]
    assert refused["args"] == {
        "amount": 5,
        "card": {"cvv": {"$redacted": "write"}, "number": "4111"},
        "key": "k",
    }
    assert "cvv-321" not in "".join(str(r.data) for r in records)  # not "321": a pid may hold it
    assert sent == []


def test_a_tool_without_a_declaration_is_irreversible(tmp_path: Path) -> None:
    config = _load(tmp_path, HEAD)
    routes = build_routes(config, {"issues": ISSUES}, NAMES)

    class NoUpstream:
        async def call(self, upstream: str, tool: str, arguments: Any) -> types.CallToolResult:
            raise AssertionError("not called")

    guards = guards_for(config, routes, NoUpstream(), CompensatorRegistry())
    assert {name: guard.semantics.value for name, guard in guards.items()} == dict.fromkeys(
        ["create_issue", "close_issue", "find_issue", "charge", "delete_repo"], "irreversible"
    )


def test_a_busy_or_impossible_port_is_one_line_naming_the_address(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(HEAD)  # read, never started: the address is taken first
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = run_cli(tmp_path / "home", "mcp", "serve", "--config", str(config), "--http",
                        "--port", str(port))  # fmt: skip
    assert taken.returncode == 1
    assert taken.stderr == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    wrong = run_cli(tmp_path / "home", "mcp", "serve", "--config", str(config), "--http",
                    "--port", "99999")  # fmt: skip
    assert wrong.returncode == 2
    assert "Invalid value for '--port': 99999 is not in the range 0<=x<=65535" in wrong.stderr
    assert "Traceback" not in wrong.stderr
