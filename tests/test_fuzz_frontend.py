"""A bounded fuzzer for the front end: mutated example `.sw` files must be accepted or refused with a
SwautoError, never with another exception; a SourceError quotes the line the lexer counts (lines end at
'\\n' only) with its caret under the column. `SWAUTO_FUZZ=N` runs N inputs instead of the default.

The mutations: byte flips, insertions of tokens and of characters that other line-counting schemes
take for line breaks (form feed, \\x0b, \\x1c-\\x1e, NEL, U+2028/9), deletions and duplications of
spans, deep nesting, long sums, and bytes that are not UTF-8 (read from a file). Inputs that check
are explored with a small candidate bound, through the pass pipeline.
"""

from __future__ import annotations

import itertools
import os
import random
import re
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES
from swauto.errors import Rejected, ScheduleError, SourceError, SwautoError
from swauto.frontend.check import check
from swauto.frontend.parser import parse
from swauto.frontend.source import Source, displayable
from swauto.machine import SUNWAY
from swauto.pipeline import lower
from swauto.schedule.space import candidates
from swauto.tuner.space import explore

SEED = 20261121
DEFAULT_INPUTS = 120  # mutated inputs by default (SWAUTO_FUZZ=N for more): the suite stays within 10 minutes
SEEDS = [path.read_text() for path in sorted(EXAMPLES.glob("*.sw"))]

SPECIAL = ["\f", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\t", "\r", "\r\n", "\n", "\x00",
           "\u00e9", "\U0001f600", "#"]
TOKENS = ["operator", "tensor", "let", "compute", "schedule", "for", "in", "..", "split", "by", "fuse", "into",
          "reorder", "any", "layout", "of", "vectorize", "over", "padded", "gemm", "gemm.M", "gemm.N.outer",
          "min(", "max(", "(", ")", "{", "}", "[", "]", ",", "=", "+", "-", "*", "/", "%", ":", ".", "0", "1", "7",
          "128", "2147483648", "99999999999999999999999999999999999", "M", "N", "K", "cCo", "cCo.inner", "i", "_"]


def _deep(rng: random.Random) -> str:
    """An expression nested (or flat) far beyond what people write."""
    n = rng.choice([10, 63, 64, 65, 200, 1000])
    kind = rng.randrange(6)
    if kind == 0:
        return "(" * n + "1" + ")" * n
    if kind == 1:
        return "-" * n + "M"
    if kind == 2:
        return "min(" * n + "M" + ", 2)" * n
    if kind == 3:
        return " + ".join(["M"] * n)
    if kind == 4:
        return "1 - (" * n + "1" + ")" * n
    return " * ".join(["M / 2"] * n)


def _deep_loops(rng: random.Random) -> str:
    n = rng.choice([5, 64, 65, 300])
    body = "gemm(M = M, N = N, K = K, A = A, B = B, C += C)"
    for level in range(n):
        body = f"for l{level} in 0..1 {{ {body} }}"
    return body


DIRECTIVES = ["split gemm.M by {32, 64}", "split gemm.K by {8}", "split cCo by {3}", "split cKr by {2}",
              "fuse cKr, cKc", "fuse cCo, cCo", "fuse cRo into gemm.M", "fuse gemm.M.outer, gemm.N.outer",
              "reorder any", "reorder {cRo, cCo}", "layout A any of {[K, M]}", "layout output [Ro, Co, B, No]",
              "vectorize gemm over {K}", "vectorize gemm over M", "split gemm.N by {0}"]
WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|[0-9]+")
NUMBERS = ["0", "1", "2", "3", "5", "8", "32", "128", "1000", "2147483647", "2147483648", "65536"]


def mutate(rng: random.Random, text: str) -> str:
    """A few random edits of `text`."""
    for _ in range(rng.choice([1, 1, 2, 3, 5])):
        position = rng.randrange(len(text) + 1)
        kind = rng.randrange(14)
        if kind >= 12:  # a schedule directive more
            at = text.find("schedule {")
            if at >= 0:
                at += len("schedule {")
                text = text[:at] + " " + rng.choice(DIRECTIVES) + " " + text[at:]
        elif kind >= 9:  # swap one word or number for another: mistakes that parse
            words = list(WORD.finditer(text))
            word = rng.choice(words)
            pool = NUMBERS if word.group()[0].isdigit() else [w.group() for w in words if not w.group()[0].isdigit()]
            text = text[: word.start()] + rng.choice(pool) + text[word.end() :]
        elif kind == 0:  # replace one character
            text = text[:position] + chr(rng.randrange(1, 0x250)) + text[position + 1 :]
        elif kind in (1, 2):
            text = text[:position] + rng.choice(SPECIAL) + text[position:]
        elif kind in (3, 4):
            text = text[:position] + " " + rng.choice(TOKENS) + " " + text[position:]
        elif kind == 5:  # delete a span
            text = text[:position] + text[position + rng.randrange(1, 40) :]
        elif kind == 6:  # duplicate a span
            start = rng.randrange(len(text) + 1)
            text = text[:position] + text[start : start + rng.randrange(1, 60)] + text[position:]
        elif kind == 7:  # a deep or long expression where a size is
            anchor = rng.choice(["M", "N", "K", "Kr", "0", "1", "B"])
            at = text.find(anchor, position)
            if at >= 0:
                text = text[:at] + _deep(rng) + text[at + len(anchor) :]
        else:  # a deep loop nest
            at = text.find("gemm(")
            end = text.find(")", at)
            if at >= 0 and end >= 0 and rng.random() < 0.5:
                text = text[:at] + _deep_loops(rng) + text[end + 1 :]
            else:
                text = text.replace("\n", rng.choice(SPECIAL[:8]) + "\n", rng.randrange(1, 4))
    return text


def assert_quotes_the_lexers_line(error: SourceError, text: str) -> None:
    """The location is inside the text as split on '\\n', the quoted line is that line, the caret is under
    the column."""
    lines = text.split("\n")
    line, column = error.location.line, error.location.column
    assert 1 <= line <= len(lines), (line, len(lines))
    assert 1 <= column <= len(lines[line - 1]) + 1, (column, lines[line - 1])
    assert error.source_line == displayable(lines[line - 1])
    rendered = str(error).split("\n")
    assert rendered[0].startswith(f"{error.location.file}:{line}:{column}: ")
    assert rendered[1] == "    " + error.source_line.rstrip()
    assert rendered[2] == "    " + " " * (column - 1) + "^"


def run_one(source: Source, outcomes: Counter, lowerings: Counter) -> None:
    """Parse, check and (if it checks) explore one input; record the outcome (and, for a large space, what
    became of the candidates lowered); any exception that is not a SwautoError propagates and fails the test."""
    try:
        op = check(parse(source), source, {})
    except SourceError as error:
        assert_quotes_the_lexers_line(error, source.text)
        outcomes[type(error).__name__] += 1
        return
    except SwautoError as error:
        outcomes[type(error).__name__] += 1
        return
    try:
        explore(op, SUNWAY, max_candidates=48)
        outcomes["accepted, space explored"] += 1
        return
    except ScheduleError as error:
        if "more than the bound of 48" not in str(error):
            outcomes["accepted, ScheduleError"] += 1
            return
    # A larger space: lower a few of its candidates through the passes instead.
    outcomes["accepted, some candidates lowered"] += 1
    for candidate in itertools.islice(candidates(op), 0, 400, 50):
        try:
            lower(op, candidate, SUNWAY)
            lowerings["lowered"] += 1
        except Rejected as rejection:
            lowerings[rejection.reason] += 1


def test_mutated_examples_give_a_result_or_a_clean_error(tmp_path):
    rng = random.Random(SEED)
    count = int(os.environ.get("SWAUTO_FUZZ", DEFAULT_INPUTS))
    outcomes: Counter = Counter()
    lowerings: Counter = Counter()
    for index in range(count):
        text = mutate(rng, rng.choice(SEEDS))
        try:
            if index % 10 == 0:  # as a file, with a byte that may not be UTF-8
                data = bytearray(text.encode())
                data[rng.randrange(len(data))] = rng.randrange(256)
                path = tmp_path / "fuzz.sw"
                path.write_bytes(bytes(data))
                try:
                    text = data.decode()
                except UnicodeDecodeError as error:
                    # The refusal points at the first bad byte's line, as the lexer would count it.
                    try:
                        Source.load(path)
                    except SourceError as refusal:
                        assert refusal.location.line == bytes(data[: error.start]).count(b"\n") + 1
                        assert "not UTF-8" in refusal.message
                        outcomes["ParseError (not UTF-8)"] += 1
                        continue
                    raise AssertionError("a non-UTF-8 file was read") from None
                run_one(Source.load(path), outcomes, lowerings)
            else:
                run_one(Source("fuzz.sw", text), outcomes, lowerings)
        except Exception as error:
            raise AssertionError(f"input {index} (seed {SEED}) raised {error!r}:\n{text[:2000]!r}") from error
    print(f"\n{count} inputs: {dict(outcomes.most_common())}; candidates: {dict(lowerings.most_common())}")
    assert sum(outcomes.values()) == count
    assert outcomes["ParseError"] and outcomes["CheckError"]  # the mutations reach both stages


@given(st.text(alphabet=st.sampled_from(list("operator g(M){}[]tensor compute gemm=,.:+-*/0123456789 \n#")
                                         + [c for c in SPECIAL if len(c) == 1]), max_size=120))
@settings(max_examples=200, deadline=None)
def test_parser_errors_quote_the_lexers_line(text):
    source = Source("prop.sw", text)
    try:
        parse(source)
    except SourceError as error:
        assert_quotes_the_lexers_line(error, text)
