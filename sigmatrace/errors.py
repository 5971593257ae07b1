"""Typed errors.  Inside, code raises these; at the top the CLI prints one line (message, then
the fix) and exits non-zero.  Tracebacks only with --debug.

Exit status, the same in every command: 2 when the command line itself is wrong (an unknown
option, a value out of range, options that exclude each other: `UsageError`, and click's own
usage errors), 1 when the command could not do its job (a program, pid, trace or output path
that is missing, unreachable or unusable: every other error)."""
from __future__ import annotations


class SigmatraceError(Exception):
    """An error the user can act on.  `hint` says what to do about it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        msg = str(self)
        return f"{msg} ({self.hint})" if self.hint else msg


class UsageError(SigmatraceError):
    """The command line is wrong: an option's value, a missing or conflicting option."""

    exit_code = 2


class TargetError(SigmatraceError):
    """The program to trace cannot be started or reached (not found, no such pid, no permission)."""


class TraceFormatError(SigmatraceError):
    """A trace directory or stream is missing, corrupt or of another format."""


class NativeMissingError(SigmatraceError):
    """A native library of ours was not built (the package was not installed with its native code)."""


class OutputError(SigmatraceError):
    """A trace directory or file of ours cannot be created where asked (a link, a directory that is
    not ours, a path that cannot be written)."""
