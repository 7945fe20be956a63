"""Hostile XML is refused with one clear line, before it can cost anything: external entities,
entity expansion (billion laughs), a 50 MB document, malformed XML; and a hostile flow within
the size cap is judged and written in linear time, with a bounded answer."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from agent_saga_bpmn import BpmnError, Flow, Task, codegen, parse_flow, validate
from agent_saga_bpmn._validate import MAX_CYCLES
from agent_saga_bpmn._xmlread import MAX_DOCUMENT_BYTES

BPMN = 'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"'


def _refusal(document: str | bytes) -> str:
    with pytest.raises(BpmnError) as caught:
        parse_flow(document)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_external_entity_is_refused_and_the_file_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t-value", encoding="utf-8")
    document = (
        '<?xml version="1.0"?>\n'
        f'<!DOCTYPE definitions [<!ENTITY leak SYSTEM "file://{secret}">]>\n'
        f'<bpmn:definitions {BPMN}><bpmn:process id="P" name="&leak;"/></bpmn:definitions>'
    )
    message = _refusal(document)
    assert message.startswith("the document declares a DTD (<!DOCTYPE definitions> at line 2)")
    assert "s3cr3t" not in message


def test_an_external_dtd_and_a_parameter_entity_are_refused() -> None:
    external = f'<!DOCTYPE d SYSTEM "http://127.0.0.1:9/x.dtd"><bpmn:definitions {BPMN}/>'
    assert "declares a DTD" in _refusal(external)
    parameter = (
        '<!DOCTYPE d [<!ENTITY % p SYSTEM "http://127.0.0.1:9/p.dtd"> %p;]>'
        f"<bpmn:definitions {BPMN}/>"
    )
    assert "declares a DTD" in _refusal(parameter.encode())


def test_billion_laughs_is_refused_at_once() -> None:
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    ]
    document = (
        f"<!DOCTYPE lolz [{''.join(entities)}]>"
        f'<bpmn:definitions {BPMN}><bpmn:process id="P" name="&lol9;"/></bpmn:definitions>'
    )
    started = time.process_time()
    message = _refusal(document.encode())
    assert "declares a DTD (<!DOCTYPE lolz> at line 1)" in message
    assert time.process_time() - started < 1.0  # 10^9 "lol"s were never expanded


def test_a_50_mb_document_is_refused_by_its_size_before_parsing() -> None:
    padding = b" " * (50 * 1024 * 1024)  # whitespace: well-formed XML if it were ever parsed
    document = b"<bpmn:definitions " + BPMN.encode() + b">" + padding + b"</bpmn:definitions>"
    message = _refusal(document)
    assert message.startswith(f"the document is {len(document):,} bytes, over the limit of")
    assert message.endswith("it was not parsed")
    text = document.decode()
    assert f"{len(text):,} characters" in _refusal(text)


def test_the_limit_is_exact() -> None:
    head = f'<bpmn:definitions {BPMN}><bpmn:process id="P"/>'.encode()
    tail = b"</bpmn:definitions>"
    fits = head + b" " * (MAX_DOCUMENT_BYTES - len(head) - len(tail)) + tail
    assert parse_flow(fits).id == "P"
    assert "over the limit" in _refusal(fits + b" ")
    multibyte = "<!--" + "é" * (MAX_DOCUMENT_BYTES // 2) + "-->"  # fits in characters only
    assert f"{len(multibyte.encode()):,} bytes" in _refusal(multibyte)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (f"<bpmn:definitions {BPMN}><bpmn:process id='P'></bpmn:definitions>",
         "malformed XML at line 1, column 99: mismatched tag"),
        ("", "malformed XML at line 1, column 1: no element found"),
        (f"<bpmn:definitions {BPMN}>\n<bpmn:process id='P' id='Q'/>",
         "malformed XML at line 2, column 22: duplicate attribute"),
        ("<a>\x00</a>", "malformed XML at line 1, column 4: not well-formed"),
        (b"\xff\xfe<\x00a\x00", "malformed XML at line 1"),
        ("<definitions/>", "not a BPMN 2.0 document: the root element is 'definitions'"),
        (f"<bpmn:definitions {BPMN}/>", "the document has no bpmn:process"),
    ],
)  # fmt: skip
def test_malformed_or_foreign_xml_is_one_clear_line(document: str | bytes, expected: str) -> None:
    assert _refusal(document).startswith(expected)


def test_anything_but_text_or_bytes_is_refused() -> None:
    assert _refusal(123) == "a BPMN document is text or bytes, not int"  # type: ignore[arg-type]


def _process(body: str) -> bytes:
    process = f'<bpmn:process id="P">{body}</bpmn:process>'
    return f"<bpmn:definitions {BPMN}>{process}</bpmn:definitions>".encode()


def _chain(count: int, element: str, back_to: str | None = None) -> str:
    """A start event then ``count`` elements in one sequence; with ``back_to``, each element
    also flows back to that one (a cycle per element)."""
    parts = ['<bpmn:startEvent id="s"/><bpmn:sequenceFlow id="f" sourceRef="s" targetRef="t0"/>']
    for i in range(count):
        parts.append(f'<bpmn:{element} id="t{i}"/>')
        if i + 1 < count:
            parts.append(f'<bpmn:sequenceFlow id="f{i}" sourceRef="t{i}" targetRef="t{i + 1}"/>')
        if back_to is not None:
            parts.append(f'<bpmn:sequenceFlow id="b{i}" sourceRef="t{i}" targetRef="{back_to}"/>')
    return "".join(parts)


def test_a_long_flow_of_irreversible_tasks_is_judged_in_linear_time() -> None:
    """Each task without a tool is IRREVERSIBLE and has no approval before it: judging whether
    one guards it must not walk the whole flow again per task (3,000 tasks took 12 s)."""
    flow = parse_flow(_process(_chain(3000, "task")))
    started = time.process_time()
    problems = validate(flow)
    assert time.process_time() - started < 1.0
    unguarded = [p for p in problems if "IRREVERSIBLE without an approval" in p.message]
    assert len(unguarded) == 3000


def test_a_flow_of_thousands_of_cycles_gets_a_bounded_answer() -> None:
    """Every task flows back to the first: thousands of cycles, each as long as the flow. The
    answer names a bounded number of them, each in a bounded line (it was 38 MB of text and
    300 MB of memory for 3,000 tasks, quadratic in the document)."""
    flow = parse_flow(_process(_chain(3000, "userTask", back_to="t0")))
    started = time.process_time()
    problems = validate(flow)
    assert time.process_time() - started < 1.0
    loops = [p for p in problems if "a cycle" in p.message]
    assert 1 <= len(loops) <= MAX_CYCLES
    assert max(len(p.message) for p in problems) < 1000
    assert loops[0].message.startswith(
        "a cycle of 3000 nodes (t0 -> t1 -> t2 -> t3 -> ... -> t2997 -> t2998 -> t2999 -> t0)"
    )
    short = validate(parse_flow(_process(_chain(2, "userTask", back_to="t0"))))
    assert {str(p) for p in short if "cycle" in p.message} == {
        "t0: a cycle (t0 -> t0): a saga runs each task once, in order",
        "t0: a cycle (t0 -> t1 -> t0): a saga runs each task once, in order",
    }


def test_thousands_of_tool_names_reducing_to_one_identifier_are_written_in_linear_time() -> None:
    """``x``, ``x.``, ``x-``, ``X:`` ... all become ``x``: each further one must not try every
    suffix taken before it (quadratic in the number of tools)."""
    separators = ("".join(seps) for n in range(1, 8) for seps in itertools.product(".-:", repeat=n))
    names = [f"{x}{tail}" for tail in separators for x in "xX"][:4000]
    tasks = tuple(Task(f"t{i}", "", "service", name, "REVERSIBLE") for i, name in enumerate(names))
    order = ["s", *(t.id for t in tasks), "e"]
    flow = Flow("P", "P", tasks, tuple(itertools.pairwise(order)), {}, ("s",), ("e",))
    started = time.process_time()
    source = codegen(flow, "many")
    assert time.process_time() - started < 1.0
    assert "def x_4000(" in source


DEFINITIONS = f'<bpmn:definitions {BPMN}><bpmn:process id="P"/></bpmn:definitions>'


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (f"<!DOCTYPE bpmn:definitions>{DEFINITIONS}", "declares a DTD"),
        (f'<!DOCTYPE d PUBLIC "-//x//x" "http://127.0.0.1:9/x.dtd">{DEFINITIONS}',
         "declares a DTD"),
        (f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE d [<!ENTITY x "y">]>{DEFINITIONS}'
         .encode("utf-16"), "declares a DTD"),
        (f'<?xml version="1.0" encoding="UTF-7"?>{DEFINITIONS}'.encode(),
         "the document cannot be read as XML"),
        (f'<bpmn:definitions {BPMN} xmlns:xml="urn:x"/>', "malformed XML at line 1"),
        (f'<bpmn:definitions {BPMN}><bpmn:process id="P" xmlns:bpmn="urn:other"/>'
         "</bpmn:definitions>", "the document has no bpmn:process"),
    ],
)  # fmt: skip
def test_doctype_encoding_and_namespace_games_are_refused(
    document: str | bytes, expected: str
) -> None:
    assert expected in _refusal(document)


def test_xinclude_and_stylesheets_are_never_followed_and_deep_nesting_is_cheap(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t-value", encoding="utf-8")
    include = (
        f'<?xml-stylesheet href="file://{secret}"?><bpmn:definitions {BPMN} '
        'xmlns:xi="http://www.w3.org/2001/XInclude"><bpmn:process id="P" name="n">'
        f'<xi:include href="file://{secret}" parse="text"/></bpmn:process></bpmn:definitions>'
    )
    assert parse_flow(include).name == "n"
    deep = 100_000
    nested = _process("<a>" * deep + "</a>" * deep)
    started = time.process_time()
    assert parse_flow(nested).unsupported == ()  # another namespace's element is skipped
    assert time.process_time() - started < 2.0
