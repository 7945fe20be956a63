"""Hostile XML is refused with one clear line, before it can cost anything: external entities,
entity expansion (billion laughs), a 50 MB document, malformed XML."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agent_saga_bpmn import BpmnError, parse_flow
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
