"""Integer expressions: simplification keeps values, and affine forms are canonical."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from swauto.ir import expr as ex

names = st.sampled_from(["i", "j", "k"])
leaves = st.one_of(st.integers(-20, 20).map(ex.Const), names.map(ex.Var))


def _combine(children):
    ops = st.sampled_from(["+", "-", "*"])
    return st.tuples(ops, children, children).map(lambda t: ex.BinOp(*t))


expressions = st.recursive(leaves, _combine, max_leaves=8)
environments = st.fixed_dictionaries({name: st.integers(-50, 50) for name in "ijk"})


@given(expressions, environments)
def test_simplify_keeps_the_value(expression, env):
    assert ex.evaluate(ex.simplify(expression), env) == ex.evaluate(expression, env)


@given(expressions)
def test_simplify_is_idempotent(expression):
    once = ex.simplify(expression)
    assert ex.simplify(once) == once


def test_affine_terms_are_canonical():
    i, j = ex.Var("i"), ex.Var("j")
    assert i * 128 + j + 3 - i * 128 == j + 3
    assert (j + i) * 2 == i * 2 + j * 2
    assert str(5 - (i + 2)) == "3 - i"
    assert str(i * 64 + j) == "i * 64 + j"


def test_floor_division_and_modulo_follow_python():
    x = ex.Var("x")
    for value in range(-9, 10):
        assert ex.evaluate(x // 4, {"x": value}) == value // 4
        assert ex.evaluate(x % 4, {"x": value}) == value % 4


def test_bounds_of_affine_expression():
    i, j = ex.Var("i"), ex.Var("j")
    assert ex.bounds(i * 2 - j + 1, {"i": (0, 3), "j": (0, 5)}) == (-4, 7)


def _expressions():
    leaves = st.one_of(st.sampled_from([ex.Var("i"), ex.Var("j")]), st.integers(-4, 4).map(ex.Const))

    def extend(children):
        binary = st.tuples(st.sampled_from(["+", "-", "min", "max"]), children, children).map(
            lambda t: ex.BinOp(*t))
        by_constant = st.tuples(st.sampled_from(["*", "/", "%"]), children, st.integers(1, 4).map(ex.Const)).map(
            lambda t: ex.BinOp(*t))
        return st.one_of(binary, by_constant)

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(_expressions(), st.integers(-3, 3), st.integers(0, 4), st.integers(-3, 3), st.integers(0, 4))
def test_bounds_contain_every_value(expr, i_low, i_span, j_low, j_span):
    """Sound for any mix of sums, floor divisions, modulos, min and max (equal terms gathered first)."""
    ranges = {"i": (i_low, i_low + i_span), "j": (j_low, j_low + j_span)}
    low, high = ex.bounds(expr, ranges)
    for i in range(i_low, i_low + i_span + 1):
        for j in range(j_low, j_low + j_span + 1):
            assert low <= ex.evaluate(expr, {"i": i, "j": j}) <= high
