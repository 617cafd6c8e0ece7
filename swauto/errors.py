"""Every error a user can cause is a `SwautoError`; its message is a sentence meant for that user."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A point in a `.sw` file, 1-based, as editors count."""

    file: str
    line: int
    column: int


class SwautoError(Exception):
    """Base of every error swauto reports to a user (the CLI prints it and exits with status 2)."""


class SourceError(SwautoError):
    """An error at a place in a `.sw` file: printed as `file:line:col: message`, the line, and a caret."""

    def __init__(self, message: str, location: SourceLocation, source_line: str) -> None:
        self.message = message
        self.location = location
        self.source_line = source_line
        caret = " " * (location.column - 1) + "^"
        super().__init__(
            f"{location.file}:{location.line}:{location.column}: {message}\n"
            f"    {source_line.rstrip()}\n    {caret}"
        )


class ParseError(SourceError):
    """The text is not in the `.sw` grammar."""


class CheckError(SourceError):
    """The text parses but means nothing: unknown names, wrong ranks, non-affine indices, ..."""


class ParameterError(SwautoError):
    """Compile-time size parameters are missing, unknown or not positive."""


class UnsupportedSizes(ParameterError):
    """The parameters are valid but the operator is not written for them (a `require` fails)."""


class ArgumentError(SwautoError):
    """A kernel was called with arrays of the wrong name, shape, dtype or memory order."""


class ScheduleError(SwautoError):
    """No candidate schedule can be built for this request (the message says which dimension and why)."""


class SimulationError(SwautoError):
    """The simulated SW26010 refused a program: a DMA out of bounds or local memory overflow."""


class CodegenError(SwautoError):
    """A backend could not generate or compile code for a candidate."""


class ModelError(SwautoError):
    """A whole model (ONNX) cannot be read, or one of its nodes cannot be compiled (the message names it)."""


class Rejected(Exception):
    """Internal: a candidate schedule is illegal for `reason` (the scheduler counts reasons).

    Not a SwautoError: it only reaches a user as a ScheduleError, when they asked for that candidate.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)
