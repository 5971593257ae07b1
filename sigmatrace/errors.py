"""Typed errors.  Inside, code raises these; at the top the CLI prints one line (message, then
the fix) and exits non-zero.  Tracebacks only with --debug."""
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
    exit_code = 2


class TargetError(SigmatraceError):
    """The program to trace cannot be started or reached (not found, no such pid, no permission)."""


class TraceFormatError(SigmatraceError):
    """A trace directory or stream is missing, corrupt or of another format."""


class NativeMissingError(SigmatraceError):
    """A native library of ours was not built (the package was not installed with its native code)."""
