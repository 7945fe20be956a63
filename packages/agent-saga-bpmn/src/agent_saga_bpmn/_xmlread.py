"""Untrusted XML in, an element tree out: size first, then defusedxml, DTDs refused.

Invariants: a document over :data:`MAX_DOCUMENT_BYTES` is refused before a parser sees a byte
of it; a document with a DTD is refused whatever the DTD holds (so no entity is ever expanded,
internal or external, and no external resource is fetched); every failure is a
:class:`~agent_saga_bpmn.BpmnError` of one line that says where (a line and column when the
parser knows them). Nothing here raises anything else on any input.
"""

from __future__ import annotations

from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as safe_tree
from defusedxml import DefusedXmlException, DTDForbidden, EntitiesForbidden

from ._model import BpmnError

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
"""The largest document read (4 MiB): a drawn flow is a few kilobytes, a recorded saga of
thousands of steps well under a megabyte."""


def document_bytes(xml: str | bytes) -> bytes:
    """``xml`` as bytes, refused when over :data:`MAX_DOCUMENT_BYTES` (a string's length is
    checked before it is encoded, so an oversized string is never copied)."""
    if isinstance(xml, str):
        if len(xml) > MAX_DOCUMENT_BYTES:  # a character is at least one byte in UTF-8
            raise _too_large(len(xml), "characters")
        try:
            data = xml.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BpmnError(f"the document is not valid text at character {exc.start}") from None
    elif isinstance(xml, bytes | bytearray):
        if len(xml) > MAX_DOCUMENT_BYTES:
            raise _too_large(len(xml), "bytes")
        data = bytes(xml)
    else:
        raise BpmnError(f"a BPMN document is text or bytes, not {type(xml).__name__}")
    if len(data) > MAX_DOCUMENT_BYTES:
        raise _too_large(len(data), "bytes")
    return data


def _too_large(size: int, unit: str) -> BpmnError:
    return BpmnError(
        f"the document is {size:,} {unit}, over the limit of {MAX_DOCUMENT_BYTES:,} bytes; "
        "it was not parsed"
    )


def read_tree(xml: str | bytes) -> Element:
    """The root element of ``xml``, parsed with defusedxml, DTDs forbidden.

    Raises:
        BpmnError: too large, malformed (with line and column), or declaring a DTD or entities.
    """
    data = document_bytes(xml)
    try:
        # A string is parsed as text (its declared encoding is not applied a second time).
        return safe_tree.fromstring(xml if isinstance(xml, str) else data, forbid_dtd=True)
    except DTDForbidden as exc:
        line = _line_of(data, b"<!DOCTYPE")
        raise BpmnError(
            f"the document declares a DTD (<!DOCTYPE {exc.name}> at line {line}): refused, "
            "a BPMN document needs none and entities are never expanded"
        ) from None
    except EntitiesForbidden as exc:
        raise BpmnError(
            f"the document declares the entity {exc.name!r}: refused, entities are never expanded"
        ) from None
    except DefusedXmlException as exc:  # external references and anything else defusedxml stops
        raise BpmnError(f"the document was refused by the hardened parser: {exc}") from None
    except ParseError as exc:
        line, column = exc.position
        reason = str(exc).split(":")[0]
        raise BpmnError(f"malformed XML at line {line}, column {column + 1}: {reason}") from None
    except (ValueError, LookupError) as exc:  # an unknown declared encoding, a NUL in a str
        raise BpmnError(f"the document cannot be read as XML: {exc}") from None


def _line_of(data: bytes, needle: bytes) -> int:
    at = data.find(needle)
    return 1 if at < 0 else data.count(b"\n", 0, at) + 1
