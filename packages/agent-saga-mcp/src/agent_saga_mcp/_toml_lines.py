"""Line numbers for keys of a TOML document, which :mod:`tomllib` does not report.

The document is parsed by ``tomllib`` (the only judge of its validity); this module reads its
text a second time, only to find where each table and key is written:

* table headers ``[a.b]`` and array-of-tables headers ``[[a.b]]`` (the n-th ``[[a.b]]`` is
  element ``n`` of array ``a.b``, as ``tomllib`` numbers it);
* ``key = ...`` and dotted ``a.b = ...`` lines, relative to the table they are written in;
* every prefix of those paths, at the first line that mentions it (so ``[x.y.z]`` also locates
  ``x`` and ``x.y`` when they have no header of their own).

A path the text does not spell out (a key inside an inline table, an element of an array)
resolves to its longest located prefix: the line that holds it. Lines inside multi-line strings
are skipped. Keys are compared after unquoting, so ``["a.b"]`` and ``[ 'a.b' ]`` are one key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

Path = tuple[str | int, ...]

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def split_key(text: str) -> tuple[str, ...] | None:
    """The parts of a (possibly dotted, possibly quoted) TOML key, or ``None`` if it is not one."""
    parts: list[str] = []
    rest = text.strip()
    while True:
        if rest.startswith('"'):
            end = _closing_quote(rest)
            if end < 0:
                return None
            try:
                parts.append(json.loads(rest[: end + 1]))
            except ValueError:
                return None
            rest = rest[end + 1 :].lstrip()
        elif rest.startswith("'"):
            end = rest.find("'", 1)
            if end < 0:
                return None
            parts.append(rest[1:end])
            rest = rest[end + 1 :].lstrip()
        else:
            match = _BARE.match(rest)
            if match is None:
                return None
            parts.append(match.group(0))
            rest = rest[match.end() :].lstrip()
        if not rest:
            return tuple(parts)
        if not rest.startswith("."):
            return None
        rest = rest[1:].lstrip()


def _closing_quote(text: str) -> int:
    """Index of the quote closing the basic string that ``text`` starts with, or -1."""
    index = 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text[index] == '"':
            return index
        index += 1
    return -1


def _key_part(line: str) -> str | None:
    """The key text before ``=`` on a ``key = value`` line (quotes respected), or ``None``."""
    index, quote = 0, ""
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "=":
            return line[:index]
        elif char == "#":
            return None
        index += 1
    return None


def _header(line: str) -> tuple[tuple[str, ...], bool] | None:
    """``(path, is_array)`` for a ``[table]`` or ``[[array]]`` header line, else ``None``."""
    stripped = line.strip()
    array = stripped.startswith("[[")
    body = stripped[2:] if array else stripped[1:]
    closing = "]]" if array else "]"
    end = -1
    index, quote = 0, ""
    while index < len(body):
        char = body[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif body.startswith(closing, index):
            end = index
            break
        index += 1
    if end < 0:
        return None
    path = split_key(body[:end])
    return (path, array) if path else None


class TomlLines:
    """Where the tables and keys of one TOML document are written (1-based line numbers)."""

    def __init__(self, text: str) -> None:
        self._lines: dict[Path, int] = {}
        self._text_lines = text.splitlines()
        counts: dict[tuple[str, ...], int] = {}
        table: Path = ()
        in_string = ""
        for number, raw in enumerate(self._text_lines, start=1):
            if in_string:
                if raw.count(in_string) % 2 == 1:
                    in_string = ""
                continue
            stripped = raw.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("["):
                found = _header(stripped)
                if found is None:
                    continue
                path, array = found
                if array:
                    index = counts.get(path, 0)
                    counts[path] = index + 1
                    table = (*path, index)
                else:
                    table = path
                self._mark(table, number)
                continue
            key_text = _key_part(raw)
            if key_text is not None:
                key = split_key(key_text)
                if key is not None:
                    self._mark((*table, *key), number)
            for quote in ('"""', "'''"):
                if raw.count(quote) % 2 == 1:
                    in_string = quote

    def _mark(self, path: Path, number: int) -> None:
        for end in range(1, len(path) + 1):
            self._lines.setdefault(path[:end], number)
        self._lines[path] = min(self._lines.get(path, number), number)

    def line_of(self, path: Sequence[str | int], value: str | None = None) -> int | None:
        """The line of ``path`` (or of its longest written prefix), or ``None``.

        With ``value``, a quoted occurrence of that string at or after the found line (up to
        the next table header) is preferred: it places an element of a multi-line array.
        """
        key = tuple(path)
        while key and key not in self._lines:
            key = key[:-1]
        if not key:
            return None
        line = self._lines[key]
        if value is None:
            return line
        needles = (json.dumps(value), f"'{value}'")
        for number in range(line, len(self._text_lines) + 1):
            text = self._text_lines[number - 1]
            if number > line and text.strip().startswith("["):
                break
            if any(needle in text for needle in needles):
                return number
        return line


__all__ = ["TomlLines", "split_key"]
