"""Parser and checker: the example parses; every bad input gets its message at its position."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import STEPS_SW
from swauto.errors import CheckError, ParameterError, ParseError
from swauto.frontend.check import check
from swauto.frontend.parser import parse
from swauto.frontend.source import Source
from swauto.ir.nodes import Call


def load(text: str, params: dict | None = None):
    source = Source("t.sw", textwrap.dedent(text).strip("\n"))
    return check(parse(source), source, params or {})


GOOD = """
operator g(M = 256, N = 128, K = 64) {
  tensor A[M, K]
  tensor B[K, N]
  tensor C[M, N]
  compute { gemm(M = M, N = N, K = K, A = A, B = B, C += C) }
  schedule { split gemm.M by {128} }
}
"""


def test_example_parses_with_positions(gemm_source):
    operator = parse(gemm_source)
    assert operator.name == "gemm"
    assert [p.name for p in operator.params] == ["M", "N", "K"]
    assert operator.tensors[0].position.line == 7
    assert operator.compute[0].primitive == "gemm"


def test_good_operator_binds_defaults_and_overrides():
    op = load(GOOD, {"N": 256})
    assert op.params == {"M": 256, "N": 256, "K": 64}
    assert op.seed.tensor("B").shape == (64, 256)
    assert [t.is_output for t in op.seed.tensors] == [False, False, True]


def test_axes_are_matched_by_name_even_when_sizes_are_equal():
    op = load(GOOD, {"M": 128, "N": 128, "K": 128})
    call = op.seed.body
    assert isinstance(call, Call)
    assert call.operand("A").dims == ("M", "K") and call.operand("B").dims == ("K", "N")


def test_explicit_dimension_indices_give_a_transposed_operand():
    op = load(GOOD.replace("tensor A[M, K]", "tensor A[K, M]").replace("A = A,", "A = A[:K, :M],"))
    assert op.seed.body.operand("A").dims == ("K", "M")


def test_loop_nest_with_affine_indices():
    op = load("""
    operator conv(B = 32, Ni = 8, No = 8, Ri = 6, Kr = 3) {
      let Ro = Ri - Kr + 1
      tensor input[Ri, Ni, B]
      tensor weight[Kr, No, Ni]
      tensor output[Ro, No, B]
      compute {
        for r in 0..Ro {
          for kr in 0..Kr {
            gemm(M = B, N = No, K = Ni, A = input[r + kr, :K, :M], B = weight[kr], C += output[r, :N, :M])
          }
        }
      }
    }
    """)
    assert op.params["Ri"] == 6
    assert str(op.seed.body.body.body.operand("A").starts[0]) == "kr + r"


BAD = [
    # (text, error class, message fragment, line, column)
    ("operator g(M) { tensor A[M] compute { gemm(M=M A=A) } }", ParseError, "expected one of", 1, 48),
    ("operator g(M) {\n  tensor A[M]\n  compute {", ParseError, "unexpected end of file", 3, 12),
    ("operator g(M) { tensor A[M$] }", ParseError, "unexpected character '$'", 1, 27),
    ("operator g(M) { tensor A[M] compute {} schedule { split x by {} } }", ParseError, "a name, an integer",
     1, 63),
    (GOOD.replace("tensor C[M, N]", "tensor C[M, Q]"), CheckError, "unknown name Q", 4, 15),
    (GOOD.replace("tensor B[K, N]", "tensor A[K, N]"), CheckError, "tensor A is already declared", 3, 10),
    (GOOD.replace("gemm(M = M", "gemmm(M = M"), CheckError, "unknown primitive gemmm", 5, 13),
    (GOOD.replace("K = K, A", "L = K, A"), CheckError, "gemm has no argument L", 5, 32),
    (GOOD.replace("K = K, A", "A = A, A"), CheckError, "argument A is given twice", 5, 39),
    (GOOD.replace("K = 64", "K = 128").replace("C += C)", "C += A)"), CheckError, "both read as A and written", 5,
     39),
    (GOOD.replace("C += C)", "C += C[0])"), CheckError, "leaves no axis for M", 5, 58),
    (GOOD.replace("B = B,", "B = X,"), CheckError, "operand B must be a tensor", 5, 46),
    (GOOD.replace("tensor A[M, K]", "tensor A[M, N]"), CheckError, "axis 1 of tensor A (128 elements) matches none",
     5, 43),
    (GOOD.replace("split gemm.M", "split gemm.Q"), CheckError, "cannot split gemm.Q", 6, 20),
    (GOOD.replace("split gemm.M by {128}", "split i by {2}"), CheckError, "no loop named i", 6, 20),
    (GOOD.replace("split gemm.M by {128}", "split gemm.M by {0}"), CheckError, "must be positive", 6, 31),
    (GOOD.replace("split gemm.M by {128}", "vectorize gemm over {K}"), CheckError,
     "can be vectorized over M or N, not K", 6, 14),
    (GOOD.replace("{128}", "{128} reorder {a, b}"), CheckError, "reorder must list every loop exactly once: M_outer",
     6, 36),
    (GOOD.replace("{128} }", "{128} reorder any with gemm.N.outer innermost }"), CheckError,
     "no loop gemm.N.outer to keep innermost; the loops reordered are M_outer", 6, 53),
    (GOOD.replace("{128} }", "{128} reorder any with gemm.M.outer innermost, gemm.M.outer outermost }"), CheckError,
     "loop gemm.M.outer is given two places", 6, 77),
    (GOOD.replace("{128} }", "{128} reorder any with gemm.M.outer first }"), ParseError, "expected", 6, 66),
    (GOOD.replace("split gemm.M by {128}", "fuse a into gemm.M"), CheckError, "no loop a to fuse; the nest has no",
     6, 14),
    (GOOD.replace("compute { gemm", "compute { for i in 0..M { for i in 0..N { gemm")
     .replace("C += C) }", "C += C) } } }"), CheckError, "loop variable i is already used", 5, 29),
    (GOOD.replace("compute { gemm", "compute { for i in 0..4 { gemm").replace("A = A,", "A = A[:M, i * i],")
     .replace("C += C) }", "C += C) } }"), CheckError, "not affine", 5, 65),
    (GOOD.replace("tensor A[M, K]", "tensor A[M, K, 2]").replace("compute { gemm", "compute { for i in 0..4 { gemm")
     .replace("A = A,", "A = A[:M, :K, i],").replace("C += C) }", "C += C) } }"), CheckError,
     "takes values 0..3, outside 0..1", 5, 69),
    (GOOD.replace("operator g(M = 256, N = 128", "operator g(M = N, N = 128"), CheckError,
     "the default of parameter M names N, which is not a parameter declared before it", 1, 12),
    ("operator g(M = 4) {\n  let R = M - 9\n  tensor A[R]\n  compute { gemm(M=R,N=R,K=R,A=A,B=A,C=A) }\n}",
     CheckError, "R is -5 for these parameters", 2, 11),
]


@pytest.mark.parametrize(("text", "kind", "fragment", "line", "column"), BAD)
def test_bad_input_is_reported_at_its_position(text, kind, fragment, line, column):
    with pytest.raises(kind) as info:
        load(text)
    error = info.value
    assert fragment in error.message
    assert (error.location.line, error.location.column) == (line, column)
    rendered = str(error).splitlines()
    assert rendered[0].startswith(f"t.sw:{line}:{column}: ")
    assert rendered[2].index("^") - 4 == column - 1  # the caret sits under the column


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"Q": 3}, "unknown parameter Q: operator g takes M, N, K"),
        ({"M": -4}, "parameter M must be a non-negative integer, got -4"),
        ({"M": 2.5}, "parameter M must be an integer"),
        ({"M": True}, "parameter M must be an integer"),
    ],
)
def test_bad_parameters(params, fragment):
    with pytest.raises(ParameterError, match=fragment):
        load(GOOD, params)


def test_zero_sized_tensor_is_reported_where_the_size_is_used():
    with pytest.raises(CheckError, match="axis of tensor A is 0 for these parameters; sizes must be positive"):
        load(GOOD, {"M": 0})


def test_missing_parameter_says_how_to_give_it():
    with pytest.raises(ParameterError, match="parameter N of operator g has no value; give it with -D N=VALUE"):
        load(GOOD.replace("N = 128,", "N,"))


@given(st.text(alphabet="operator g(M){}[]tensor compute gemm=,.:+-*/0123456789 \n#", max_size=80))
def test_parser_never_fails_with_anything_but_a_parse_error(text):
    try:
        parse(Source("fuzz.sw", text))
    except ParseError as error:
        assert error.location.line >= 1 and error.location.column >= 1


# --- limits, deep inputs and line counting (issue 14) -----------------------------------------------

DEEP = """
operator g(M = 256, N = 128, K = 64) {
  let R = EXPR
  tensor A[M, K]
  tensor B[K, N]
  tensor C[M, N]
  compute { gemm(M = M, N = N, K = K, A = A, B = B, C += C) }
}
"""


@pytest.mark.parametrize(("expression", "value"), [
    (" + ".join(["M"] * 500), 500 * 256),  # a long sum is flat: no recursion over its terms
    (" + ".join(["M / 2"] * 1000) + " - M", 1000 * 128 - 256),
    (" * ".join(["1"] * 2000) + " * N", 128),
    ("-" * 500 + "M", 256),  # a run of minus signs is one node
    ("-" * 1001 + "M + 2 * M", 256),
    ("(" * 1000 + "K" + ")" * 1000, 64),  # parentheses alone do not nest the tree
    ("min(" * 64 + "M" + ", 300)" * 64, 256),  # the deepest nesting allowed
])
def test_long_and_deep_expressions_that_are_accepted(expression, value):
    op = load(DEEP.replace("EXPR", expression).replace("tensor A[M, K]", "tensor A[M, K]\n  tensor D[R]"))
    assert op.seed.tensor("D").shape == (value,)


@pytest.mark.parametrize(("expression", "column"), [
    ("min(" * 1000 + "M" + ", 2)" * 1000, 11 + 4 * 64),  # the 65th min
    ("1 - (" * 500 + "1" + ")" * 500, 11 + 5 * 64),  # the 65th sum
    ("-(" * 65 + "M" + ")" * 65, 11 + 2 * 64),
])
def test_absurd_nesting_is_refused_where_it_passes_the_limit(expression, column):
    with pytest.raises(ParseError, match="expression nested too deeply \\(the limit is 64") as info:
        load(DEEP.replace("EXPR", expression))
    assert (info.value.location.line, info.value.location.column) == (2, column)


def test_a_loop_nest_deeper_than_the_limit_is_refused_at_the_first_loop_past_it():
    body = "gemm(M = M, N = N, K = K, A = A, B = B, C += C)"
    for level in range(1000):
        body = f"for i{level} in 0..1 {{\n{body} }}"
    text = DEEP.replace("let R = EXPR\n", "").replace(
        "compute { gemm(M = M, N = N, K = K, A = A, B = B, C += C) }", f"compute {{\n{body} }}")
    with pytest.raises(ParseError, match="loops nested too deeply \\(the limit is 64\\)") as info:
        load(text)
    assert info.value.location.line == 6 + 64 and info.value.source_line.startswith("for i935 in")


def test_sixty_four_nested_loops_are_accepted():
    body = "gemm(M = M, N = N, K = K, A = A, B = B, C += C)"
    for level in range(64):
        body = f"for i{level} in 0..2 {{ {body} }}"
    op = load(DEEP.replace("let R = EXPR\n", "").replace(
        "compute { gemm(M = M, N = N, K = K, A = A, B = B, C += C) }", f"compute {{ {body} }}"))
    assert len(op.space.loops) == 64


def test_fusing_a_loop_with_itself_is_a_check_error():
    text = GOOD.replace("compute { gemm", "compute { for i in 0..4 { gemm").replace("C += C) }", "C += C) } }")
    with pytest.raises(CheckError, match="cannot fuse loop i with itself") as info:
        load(text.replace("split gemm.M by {128}", "fuse i, i"))
    assert (info.value.location.line, info.value.location.column) == (6, 22)


@pytest.mark.parametrize(("text", "kind", "fragment", "line", "column"), [
    (GOOD.replace("K = 64", "K = 2147483648"), ParseError, "integer 2147483648 is too large", 1, 34),
    (GOOD.replace("{128}", "{" + "9" * 5000 + "}"), ParseError, "(5000 characters) is too large", 6, 31),
    (GOOD.replace("tensor A[M, K]", "let R = M * M * M * M * M\n  tensor A[M, K]"), CheckError,
     "R is 1099511627776 for these parameters; sizes must be at most 2147483647", 2, 11),
    (GOOD.replace("tensor A[M, K]", "let R = " + " * ".join(["M"] * 2000) + "\n  tensor A[M, K]"), CheckError,
     "R is about 2**16000 for these parameters", 2, 11),
    (GOOD.replace("tensor A[M, K]", "tensor A[M, K]\n  tensor D[M, M, M, M, M, M]"), CheckError,
     "tensor D has 281474976710656 elements for these parameters; a tensor may have at most", 3, 10),
])
def test_sizes_beyond_the_bounds_are_refused_at_their_place(text, kind, fragment, line, column):
    with pytest.raises(kind) as info:
        load(text, {"M": 256})
    assert fragment in info.value.message
    assert (info.value.location.line, info.value.location.column) == (line, column)


@pytest.mark.parametrize(("params", "fragment"), [
    ({"N": 2**63}, "parameter N must be at most 2147483647, got 9223372036854775808"),
    ({"N": "512"}, "parameter N must be an integer, got '512' (str)"),
    ({"N": 512.0}, "parameter N must be an integer, got 512.0 (float)"),
])
def test_parameters_beyond_the_bounds_or_of_other_types(params, fragment):
    with pytest.raises(ParameterError, match=fragment.replace("(", "\\(").replace(")", "\\)")):
        load(GOOD, params)


def test_parameters_that_are_not_a_mapping():
    source = Source("t.sw", GOOD)
    with pytest.raises(ParameterError, match="the parameters must be a mapping of names to integers, got \\[1\\]"):
        check(parse(source), source, [1])


# Characters that str.splitlines() takes for line breaks but the lexer (and editors' line numbers) do not.
SEPARATORS = ["\f", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]


@pytest.mark.parametrize("separator", SEPARATORS)
@pytest.mark.parametrize("stage", ["parse", "check", "lexer"])
def test_the_quoted_line_is_the_line_the_lexer_counts(separator, stage):
    text = GOOD.strip("\n").replace("tensor A[M, K]", f"tensor A[M, K]  # one{separator}two{separator}three")
    if stage == "parse":
        text = text.replace("tensor C[M, N]", "tensor C[M N]")
    elif stage == "check":
        text = text.replace("tensor C[M, N]", "tensor C[M, Q]")
    else:
        text = text.replace("tensor C[M, N]", f"tensor C[M,{separator} N]")
        if separator in "\f\r":  # whitespace to the lexer
            assert load(text).seed.tensor("C").shape == (256, 128)
            return
    with pytest.raises((ParseError, CheckError)) as info:
        load(text)
    error = info.value
    line = text.split("\n")[error.location.line - 1]
    assert error.location.line == 4
    assert error.source_line == "".join(c if c.isprintable() else " " for c in line)
    rendered = str(error).split("\n")
    assert rendered[1] == "    " + error.source_line.rstrip()
    assert rendered[2] == "    " + " " * (error.location.column - 1) + "^"
    assert error.location.column <= len(line) + 1


def test_a_tab_is_shown_as_one_space_so_the_caret_stays_under_its_column():
    with pytest.raises(CheckError) as info:
        load(GOOD.replace("tensor C[M, N]", "tensor C[M,\tQ]"))
    assert str(info.value).split("\n")[1:] == ["      tensor C[M, Q]", "                  ^"]


def test_a_file_that_is_not_utf8_is_refused_at_its_first_bad_byte(tmp_path):
    path = tmp_path / "latin1.sw"
    path.write_bytes(b"operator g(M = 4) {\n  # caf\xe9 au lait\n}\n")
    with pytest.raises(ParseError) as info:
        parse(path)
    assert info.value.message == "the file is not UTF-8 text: 0xe9 at byte offset 27 cannot be decoded"
    assert str(info.value).startswith(f"{path}:2:8: ")
    assert info.value.source_line == "  # caf\ufffd au lait"


def test_end_of_file_is_reported_after_the_last_token():
    with pytest.raises(ParseError, match="unexpected end of file") as info:
        load("operator g(M) {\n  tensor A[M]\n  compute {  # the rest is missing\n\n")
    assert (info.value.location.line, info.value.location.column) == (3, 12)


# --- tiles at an offset, sequence loops, maps reading their own tensor, require (issue 10) -----------

TILES = """
operator tiles(T = 3, C = 8) {
  tensor d[2 * T + 2, C]
  tensor v[T, 4, C]
  compute { for t in 0..T { rows: copy(M = 4, N = C, X = d[:M + 2 * t], Z = v[t]) } }
}
"""


def test_a_dimension_can_start_at_an_offset_along_its_axis():
    call = load(TILES).seed.body.body
    assert str(call.operand("X").starts[0]) == "t * 2" and call.operand("X").extents == (4, 8)


def test_an_offset_tile_reaching_outside_its_tensor_is_refused_where_it_is_written():
    with pytest.raises(CheckError, match=r"index t \* 2 \+ \(0\.\.3\) of tensor d axis 0 takes values 0\.\.7, "
                                         r"outside 0\.\.6") as info:
        load(TILES.replace("tensor d[2 * T + 2, C]", "tensor d[2 * T + 1, C]"))
    assert info.value.location.line == 4


def test_loops_writing_one_axis_in_mixed_radix_must_not_overlap():
    text = """
    operator blocks(T = 3) {
      tensor x[3 * T, 4]
      tensor y[3 * T, 4]
      compute { for t in 0..T { for r in 0..R { copy(M = 4, X = x[S * t + r], Z = y[S * t + r]) } } }
    }
    """
    assert load(text.replace("R", "3").replace("S", "3"))  # rows 3t, 3t+1, 3t+2: each written once
    with pytest.raises(CheckError, match="steps axis 0 by 2 where the boxes inside it span 3 elements"):
        load(text.replace("R", "3").replace("S", "2"))


def test_a_loop_around_several_statements_runs_them_in_sequence():
    text = STEPS_SW
    op = load(text)
    assert op.space.nests == ((), (), ())  # the sequence loop is no statement's loop: never reordered or split
    assert op.seed.body.stmts[1].var == "t" and len(op.seed.body.stmts[1].body.stmts) == 2
    inside = text.replace("for t in 1..T {", "for u in 0..1 { for t in 1..T {").replace("Z = s, by = 0.5)\n",
                                                                                       "Z = s, by = 0.5) }\n")
    with pytest.raises(CheckError, match="loop t holds several statements, so it runs them in sequence; it must be "
                                         "outside every other loop of its statement, not inside loop u"):
        load(inside)


def test_a_map_may_read_parts_of_its_output_tensor_it_never_writes():
    text = """
    operator halves(N = 8) {
      tensor g[2 * N]
      compute { mul(N = N, X = g[:N + 0], Y = g[:N + OFFSET], Z = g[:N + 0]) }
    }
    """
    assert load(text.replace("OFFSET", "N"))
    with pytest.raises(CheckError, match="tensor g is both read as Y and written"):
        load(text.replace("OFFSET", "4"))


def test_require_states_the_sizes_an_operator_is_written_for():
    text = GOOD.replace("tensor A[M, K]", "require K <= 128\n  tensor A[M, K]")
    assert load(text, {"K": 128})
    with pytest.raises(ParameterError, match=r"operator g is written for `require K <= 128`, which does not hold "
                                             r"for these parameters \(256 <= 128 is false\)"):
        load(text, {"K": 256})


def test_reorder_one_statement_permutes_only_its_loops():
    text = """
    operator two(N = 4) {
      tensor x[N, N, N]
      tensor y[N, N, N]
      compute {
        for a in 0..N { for b in 0..N { first: copy(N = N, X = x[a, b], Z = y[a, b]) } }
        for c in 0..N { for d in 0..N { second: relu(N = N, X = y[c, d], Z = y[c, d]) } }
      }
      schedule { reorder second any }
    }
    """
    from swauto.schedule.space import candidates

    assert {c.order for c in candidates(load(text))} == {("a", "b", "c", "d"), ("a", "b", "d", "c")}


def test_a_statement_is_fused_only_into_a_producer_inside_the_same_sequence_loops():
    text = """
    operator twice(T = 3, N = 8) {
      tensor x[N]
      tensor y[N]
      compute {
        first: copy(N = N, X = x, Z = y)
        for t in 0..T {
          relu(N = N, X = y, Z = y)
          scale(N = N, X = y, Z = y, by = 0.5)
        }
      }
      schedule { fuse relu into first }
    }
    """
    with pytest.raises(CheckError, match="relu and first are not inside the same sequence loops"):
        load(text)


def test_split_factors_are_expressions_of_the_parameters():
    """`split x by {..}` takes integer expressions of the parameters, evaluated when they are bound (a
    `.sw` adapts its tiles to the sizes); one that is not positive is refused where it stands (the
    position test above); a loop split into tiles of one only is not split: it keeps its name (which
    `x.outer` then names) and fusing its inner part changes nothing."""
    text = GOOD.replace("split gemm.M by {128}", "split gemm.M by {M / 4, max(1, 512 / N)}")
    assert load(text, {}).space.splits[0].factors == (4, 64)
    assert load(text, {"N": 1024}).space.splits[0].factors == (1, 64)
    with pytest.raises(CheckError, match=r"split factors must be positive; this one is 0 for these parameters"):
        load(GOOD.replace("split gemm.M by {128}", "split gemm.M by {N / 256}"), {})
    rows = """
operator h(R = 4, M = 64, N = 64, K = 64) {
  tensor A[R, M, K]
  tensor B[K, N]
  tensor C[R, M, N]
  compute { for r in 0..R { gemm(M = M, N = N, K = K, A = A[r], B = B, C += C[r]) } }
  schedule { split r by {1, 8 / R} fuse r.inner into gemm.M reorder any with r.outer outermost }
}
"""
    split = load(rows, {}).space
    assert [s.factors for s in split.splits] == [(1, 2)] and "r_outer" in split.loops
    whole = load(rows, {"R": 8}).space  # 8 / 8 = 1: tiles of one row, no split
    assert not whole.splits and "r" in whole.loops
    with pytest.raises(CheckError, match="split twice"):
        load(rows.replace("split r by {1, 8 / R}", "split r by {8 / R} split r by {2}"), {"R": 8})
