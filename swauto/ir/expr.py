"""Integer expressions of the IR: constants, variables, + - * floor-division modulo min max.

Expressions are frozen dataclasses (so they compare and hash structurally) and are simplified as
they are built: affine parts are kept in a canonical sum-of-terms order, constants fold, and
`x*1`, `x+0`, `min(c1, c2)` ... disappear. Division and modulo are floor operations (Python's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache

ExprLike = "Expr | int"


class Expr:
    """Base of all expressions; the arithmetic operators build simplified expressions."""

    __slots__ = ()

    def __add__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("+", self, as_expr(other)))

    def __radd__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("+", as_expr(other), self))

    def __sub__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("-", self, as_expr(other)))

    def __rsub__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("-", as_expr(other), self))

    def __mul__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("*", self, as_expr(other)))

    def __rmul__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("*", as_expr(other), self))

    def __floordiv__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("/", self, as_expr(other)))

    def __mod__(self, other: Expr | int) -> Expr:
        return simplify(BinOp("%", self, as_expr(other)))

    def __neg__(self) -> Expr:
        return simplify(BinOp("*", Const(-1), self))

    def __str__(self) -> str:
        return to_source(self)


@dataclass(frozen=True, eq=True, repr=False)
class Const(Expr):
    value: int

    def __repr__(self) -> str:
        return f"Const({self.value})"


@dataclass(frozen=True, eq=True, repr=False)
class Var(Expr):
    name: str

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


@dataclass(frozen=True, eq=True, repr=False)
class BinOp(Expr):
    """`op` is one of + - * / % min max (`/` is floor division)."""

    op: str
    left: Expr
    right: Expr

    def __repr__(self) -> str:
        return f"BinOp({self.op!r}, {self.left!r}, {self.right!r})"

    @cached_property
    def _hash(self) -> int:  # expressions are hashed often (caches, golden tests)
        return hash((self.op, self.left, self.right))

    def __hash__(self) -> int:
        return self._hash


def as_expr(value: Expr | int) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not an integer expression: {value!r}")
    return Const(value)


def minimum(a: Expr | int, b: Expr | int) -> Expr:
    return simplify(BinOp("min", as_expr(a), as_expr(b)))


def maximum(a: Expr | int, b: Expr | int) -> Expr:
    return simplify(BinOp("max", as_expr(a), as_expr(b)))


# --- affine forms ---------------------------------------------------------------------------------

Linear = tuple[dict[str, int], int]


@lru_cache(maxsize=1 << 16)
def linear_form(expr: Expr) -> Linear | None:
    """`expr` as ({variable: coefficient}, constant) if it is affine, else None (cached: callers must
    not modify the dictionary)."""
    if isinstance(expr, Const):
        return {}, expr.value
    if isinstance(expr, Var):
        return {expr.name: 1}, 0
    assert isinstance(expr, BinOp)
    left, right = linear_form(expr.left), linear_form(expr.right)
    if left is None or right is None:
        return None
    (lc, lk), (rc, rk) = left, right
    if expr.op in "+-":
        sign = 1 if expr.op == "+" else -1
        coefficients = dict(lc)
        for name, c in rc.items():
            coefficients[name] = coefficients.get(name, 0) + sign * c
        return {n: c for n, c in coefficients.items() if c}, lk + sign * rk
    if expr.op == "*":
        if not lc:
            return {n: c * lk for n, c in rc.items() if c * lk}, lk * rk
        if not rc:
            return {n: c * rk for n, c in lc.items() if c * rk}, lk * rk
        return None
    if expr.op == "/" and not lc and not rc and rk != 0:
        return {}, lk // rk
    if expr.op == "%" and not lc and not rc and rk != 0:
        return {}, lk % rk
    if expr.op in ("min", "max") and not lc and not rc:
        return {}, (min if expr.op == "min" else max)(lk, rk)
    return None


def from_linear(coefficients: Mapping[str, int], constant: int) -> Expr:
    """Canonical expression of an affine form: positive terms in name order, the constant, then
    the negative terms subtracted (`i * 64 + j + 3 - k`)."""

    def term(name: str, c: int) -> Expr:
        return Var(name) if c == 1 else BinOp("*", Var(name), Const(c))

    result: Expr | None = None
    for name in sorted(coefficients):
        if coefficients[name] > 0:
            t = term(name, coefficients[name])
            result = t if result is None else BinOp("+", result, t)
    if result is None:
        result = Const(constant)
    elif constant > 0:
        result = BinOp("+", result, Const(constant))
    elif constant < 0:
        result = BinOp("-", result, Const(-constant))
    for name in sorted(coefficients):
        if coefficients[name] < 0:
            t = term(name, -coefficients[name])
            result = BinOp("-", result, t)
    return result


@lru_cache(maxsize=1 << 16)
def simplify(expr: Expr) -> Expr:
    """Canonical, folded form of `expr` (see the module docstring)."""
    if not isinstance(expr, BinOp):
        return expr
    form = linear_form(expr)
    if form is not None:
        return from_linear(*form)
    left, right = simplify(expr.left), simplify(expr.right)
    op = expr.op
    if isinstance(right, Const):
        if op == "*" and right.value == 1 or op == "/" and right.value == 1:
            return left
        if op == "%" and right.value == 1:
            return Const(0)
        if op == "/" and isinstance(left, BinOp) and left.op == "*" and left.right == right:
            return left.left  # (x*c)/c == x
    if op in ("min", "max") and left == right:
        return left
    return BinOp(op, left, right)


# --- queries --------------------------------------------------------------------------------------


@lru_cache(maxsize=1 << 16)
def free_vars(expr: Expr) -> frozenset[str]:
    if isinstance(expr, Var):
        return frozenset((expr.name,))
    if isinstance(expr, BinOp):
        return free_vars(expr.left) | free_vars(expr.right)
    return frozenset()


def substitute(expr: Expr, mapping: Mapping[str, Expr | int]) -> Expr:
    """`expr` with each variable named in `mapping` replaced, simplified."""
    if isinstance(expr, Var):
        return as_expr(mapping[expr.name]) if expr.name in mapping else expr
    if isinstance(expr, BinOp):
        return simplify(BinOp(expr.op, substitute(expr.left, mapping), substitute(expr.right, mapping)))
    return expr


_EVALUATE = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "min": min,
    "max": max,
}


def evaluate(expr: Expr, env: Mapping[str, int]) -> int:
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Var):
        return env[expr.name]
    assert isinstance(expr, BinOp)
    return _EVALUATE[expr.op](evaluate(expr.left, env), evaluate(expr.right, env))


def _python(expr: Expr) -> str:
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, Var):
        return f"env[{expr.name!r}]"
    assert isinstance(expr, BinOp)
    if expr.op in ("min", "max"):
        return f"{expr.op}({_python(expr.left)}, {_python(expr.right)})"
    op = "//" if expr.op == "/" else expr.op
    return f"({_python(expr.left)} {op} {_python(expr.right)})"


@lru_cache(maxsize=65536)
def compiled(expr: Expr) -> Callable[[Mapping[str, int]], int]:
    """`expr` as a Python function of an environment: `evaluate` for code that runs it many times."""
    return eval(f"lambda env: {_python(expr)}")  # noqa: S307 - the text is built from IR nodes only


def bounds(expr: Expr, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    """Smallest and largest value of `expr` when each variable v lies in ranges[v] (inclusive).

    Exact for affine expressions; otherwise an interval that contains every value (floor division
    and modulo by positive constants, min and max are handled; anything else raises ValueError). A sum
    is bounded term by term after equal terms are gathered, so `x / 3 + i - x / 3` is bounded as `i`.
    """
    terms, low = _terms(expr)
    high = low
    for term, c in terms.items():
        lo, hi = ranges[term.name] if isinstance(term, Var) else _term_bounds(term, ranges)
        low += c * (lo if c > 0 else hi)
        high += c * (hi if c > 0 else lo)
    return low, high


def _terms(expr: Expr) -> tuple[dict[Expr, int], int]:
    """`expr` as a sum of coefficient x term plus a constant, a term being a variable or a
    subexpression that is not a sum (a floor division, a modulo, a min or max, a product of two
    non-constants); terms equal as expressions are gathered (their coefficients may cancel)."""
    form = linear_form(expr)
    if form is not None:
        return {Var(name): c for name, c in form[0].items()}, form[1]
    assert isinstance(expr, BinOp)
    if expr.op in "+-" or expr.op == "*" and (isinstance(expr.left, Const) or isinstance(expr.right, Const)):
        (left, a), (right, b) = _terms(expr.left), _terms(expr.right)
        if expr.op == "*":
            scale, (terms, constant) = (a, (right, b)) if isinstance(expr.left, Const) else (b, (left, a))
            return {t: c * scale for t, c in terms.items() if c * scale}, constant * scale
        sign = 1 if expr.op == "+" else -1
        gathered = dict(left)
        for term, c in right.items():
            gathered[term] = gathered.get(term, 0) + sign * c
        return {t: c for t, c in gathered.items() if c}, a + sign * b
    return {expr: 1}, 0


def _term_bounds(expr: BinOp, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    """Bounds of a term of `_terms`: an operation other than + and - (or * by a constant)."""
    (a, b), (c, d) = bounds(expr.left, ranges), bounds(expr.right, ranges)
    if expr.op == "*":
        products = (a * c, a * d, b * c, b * d)
        return min(products), max(products)
    if expr.op in ("min", "max"):
        pick = min if expr.op == "min" else max
        return pick(a, c), pick(b, d)
    if expr.op in "/%" and c == d and c > 0:
        if expr.op == "/":
            return a // c, b // c
        return (a % c, b % c) if b - a < c and a % c <= b % c else (0, c - 1)
    raise ValueError(f"no bounds for {expr}")


def upper_bound(expr: Expr | int, ranges: Mapping[str, tuple[int, int]]) -> int:
    return expr if isinstance(expr, int) else bounds(expr, ranges)[1]


def simplify_in(expr: Expr, ranges: Mapping[str, tuple[int, int]]) -> Expr:
    """`expr` simplified knowing each variable v lies in ranges[v] (inclusive): a min or max whose
    operands' difference has a known sign is replaced by the smaller or larger operand."""
    if not isinstance(expr, BinOp):
        return expr
    left, right = simplify_in(expr.left, ranges), simplify_in(expr.right, ranges)
    if expr.op in ("min", "max"):
        difference = left - right
        if affine_over(difference, ranges):
            low, high = bounds(difference, ranges)
            if high <= 0:
                return left if expr.op == "min" else right
            if low >= 0:
                return right if expr.op == "min" else left
    return simplify(BinOp(expr.op, left, right))


def affine_over(expr: Expr, ranges: Mapping[str, tuple[int, int]]) -> bool:
    """True when `expr` is affine in variables that all have a range."""
    form = linear_form(expr)
    return form is not None and all(name in ranges for name in form[0])


def constant_value(expr: Expr) -> int | None:
    return expr.value if isinstance(expr, Const) else None


# --- printing -------------------------------------------------------------------------------------

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}


def to_source(expr: Expr, parent: int = 0) -> str:
    """Readable infix form; min/max print as calls."""
    if isinstance(expr, Const):
        return str(expr.value) if expr.value >= 0 or parent == 0 else f"({expr.value})"
    if isinstance(expr, Var):
        return expr.name
    assert isinstance(expr, BinOp)
    if expr.op in ("min", "max"):
        return f"{expr.op}({to_source(expr.left)}, {to_source(expr.right)})"
    precedence = _PRECEDENCE[expr.op]
    # The right operand of - / % binds tighter than its own level so `a - (b + c)` keeps its parentheses.
    right_level = precedence + (1 if expr.op in "-/%" else 0)
    text = f"{to_source(expr.left, precedence)} {expr.op} {to_source(expr.right, right_level)}"
    return f"({text})" if precedence < parent else text
