"""Writing XML text: elements as nested tuples, escaped attribute values and text.

Invariants: every attribute value and text node is escaped, and characters XML 1.0 cannot hold
(control characters other than tab, newline and carriage return, lone surrogates, U+FFFE/FFFF)
are written as the visible text ``\\xNN`` / ``\\uNNNN``, so log contents of any kind always give
a well-formed document.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_ATTRIBUTE_ENTITIES = {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
"""Whitespace an attribute keeps only as a character reference (a parser normalises it)."""


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def xml_safe(text: str) -> str:
    """``text`` with the characters XML cannot hold shown as escapes."""
    return _NOT_XML.sub(_visible, text)


@dataclass
class Node:
    """An element to write: a qualified tag (``bpmn:task``), attributes, text, children."""

    tag: str
    attrs: Mapping[str, str | int | float] = field(default_factory=dict)
    children: Sequence[Node] = ()
    text: str | None = None


def _number(value: str | int | float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def write(node: Node, indent: int = 0) -> list[str]:
    """The lines of ``node`` and its children, indented by two spaces a level."""
    pad = "  " * indent
    attrs = "".join(
        f" {name}={quoteattr(xml_safe(_number(value)), _ATTRIBUTE_ENTITIES)}"
        for name, value in node.attrs.items()
    )
    if node.text is not None:
        return [f"{pad}<{node.tag}{attrs}>{escape(xml_safe(node.text))}</{node.tag}>"]
    if not node.children:
        return [f"{pad}<{node.tag}{attrs} />"]
    lines = [f"{pad}<{node.tag}{attrs}>"]
    for child in node.children:
        lines += write(child, indent + 1)
    lines.append(f"{pad}</{node.tag}>")
    return lines


def document(root: Node) -> str:
    """A whole document: the XML declaration, then ``root``."""
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', *write(root)]) + "\n"
