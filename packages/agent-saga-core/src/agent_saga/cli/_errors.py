"""Exit codes and the one-line error every failing command ends with."""

from __future__ import annotations

import click

EXIT_OK = 0
"""Success; ``verify``: the log is intact; ``status``: ready."""
EXIT_FAILED = 1
"""The answer is no, or the action failed: the log does not verify, status is not ready."""
EXIT_USAGE = 2
"""Bad input: a bad option, an unknown or ambiguous saga id, no home or no log at the path."""


def one_line(text: str) -> str:
    """``text`` on one line, with control characters (newlines, escapes) shown as ``\\xNN``.

    Log contents are untrusted: a reason or an error message must not be able to move the cursor
    or recolour the terminal of the person reading it.
    """
    out: list[str] = []
    for char in text:
        code = ord(char)
        if code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        else:
            out.append(char)
    return "".join(out)


class CliError(click.ClickException):
    """A failure reported as ``Error: <one line>`` on stderr; exits with :data:`EXIT_FAILED`."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class BadInputError(CliError):
    """Input that names nothing usable (no home, no log, no such saga); exits :data:`EXIT_USAGE`."""

    exit_code = EXIT_USAGE
