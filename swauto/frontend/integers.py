"""The one place where integers given by a user (size parameters, command-line options, API
arguments) are read and range-checked, so every entry point refuses the same things the same way."""

from __future__ import annotations

import operator
import re

from swauto.errors import ArgumentError, SwautoError

# The largest size (parameter, derived size, tensor axis, integer literal) swauto accepts: every
# index and extent then fits a 32-bit integer, and products of a few of them fit 64 bits.
MAX_SIZE = 2**31 - 1
# The most elements one tensor may have (4 TiB of float32): byte offsets stay far inside 64 bits.
MAX_ELEMENTS = 2**40

_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_integer(text: str, what: str, error: type[SwautoError] = ArgumentError) -> int:
    """`text` as an int when it is plain decimal digits with an optional sign (no spaces, no
    underscores, no other base, at most 30 digits); else `error` naming `what`."""
    if not _DECIMAL.fullmatch(text) or len(text.lstrip("+-")) > 30:
        raise error(f"{what} must be an integer written in decimal digits, got {text!r}")
    return int(text)


def check_integer(value: object, what: str, minimum: int | None = None, maximum: int | None = None,
                  error: type[SwautoError] = ArgumentError, why: str = "") -> int:
    """`value` as an int when it is an integer (an int or anything with `__index__`, not a bool, not a
    float) within [minimum, maximum]; else `error` with a sentence naming `what` (and `why` the
    maximum is what it is, when given)."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise error(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    number = operator.index(value)
    if minimum is not None and number < minimum:
        bound = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"at least {minimum}")
        raise error(f"{what} must be {bound}, got {number}")
    if maximum is not None and number > maximum:
        raise error(f"{what} must be at most {maximum}{f' ({why})' if why else ''}, got {number}")
    return number
