"""Abstract syntax of the `.sw` language: one frozen dataclass per construct, each with its position."""

from __future__ import annotations

from dataclasses import dataclass

from swauto.frontend.source import Position

# --- integer expressions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    value: int
    position: Position


@dataclass(frozen=True)
class Name:
    id: str
    position: Position


@dataclass(frozen=True)
class BinaryOp:
    op: str  # one of + - * / %
    left: Expression
    right: Expression
    position: Position


@dataclass(frozen=True)
class Negate:
    operand: Expression
    position: Position


@dataclass(frozen=True)
class Function:
    name: str  # min or max
    args: tuple[Expression, ...]
    position: Position


Expression = Number | Name | BinaryOp | Negate | Function

# --- declarations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    default: int | str | None  # a value, an earlier parameter's name, or none (it must be given)
    position: Position


@dataclass(frozen=True)
class Let:
    name: str
    value: Expression
    position: Position


@dataclass(frozen=True)
class Require:
    """`require stride == 1`: a condition on the sizes the operator is written for."""

    left: Expression
    op: str  # == != < <= > >=
    right: Expression
    position: Position


@dataclass(frozen=True)
class TensorDecl:
    name: str
    shape: tuple[Expression, ...]
    padded: bool  # reads outside the tensor give 0
    position: Position
    local: bool = False  # an intermediate of the operator: not an argument of the kernel


# --- the compute seed -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DimIndex:
    """`:M` in an operand slice: this axis carries the primitive's dimension M, from index 0, or
    from `offset` with `:M + offset` (a tile of the axis, such as Winograd's overlapping 4 x 4 tiles)."""

    dim: str
    position: Position
    offset: Expression | None = None


@dataclass(frozen=True)
class Slice:
    """`input[cRo + cKr, cCo + cKc]`: leading axes indexed, trailing axes left to the primitive."""

    tensor: str
    indices: tuple[Expression | DimIndex, ...]
    position: Position


@dataclass(frozen=True)
class FloatLiteral:
    """A real number given to a primitive's scalar argument (`scale(..., by = 0.125)`)."""

    value: float
    position: Position


@dataclass(frozen=True)
class Argument:
    name: str
    value: Expression | Slice | FloatLiteral
    position: Position
    accumulate: bool = False  # `C += tensor`: the result is combined into the tensor's values


@dataclass(frozen=True)
class Call:
    primitive: str
    arguments: tuple[Argument, ...]
    position: Position
    label: str | None = None  # `bias: add(...)`: the name the schedule block uses for this statement

    @property
    def name(self) -> str:
        """The statement's name in the schedule block: its label, else its primitive's name."""
        return self.label or self.primitive


@dataclass(frozen=True)
class ForLoop:
    var: str
    start: Expression
    stop: Expression
    body: tuple[Statement, ...]
    position: Position


Statement = ForLoop | Call

# --- the schedule block ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A dotted name: a loop (`cCo`, `cCo.inner`) or a primitive dimension (`gemm.M`, `gemm.M.outer`)."""

    parts: tuple[str, ...]
    position: Position

    def __str__(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class Split:
    """`split x by {4, 8, Co / 2}`: the tile sizes, integer expressions of the parameters."""

    target: Target
    factors: tuple[Expression, ...]
    position: Position


@dataclass(frozen=True)
class Reorder:
    """`reorder {a, b, c}` (this order), `reorder any` (every statement's loops in any order) or
    `reorder gemm any` (that statement's); `... any with gemm.K.outer innermost, ...`: those loops
    keep that place (outermost or innermost, in the order listed) and the others take every order."""

    order: tuple[Target, ...] | None  # None: any legal order
    position: Position
    statement: str | None = None
    pins: tuple[tuple[Target, str], ...] = ()  # (loop, "outermost" | "innermost")


@dataclass(frozen=True)
class Fuse:
    """`fuse a into gemm.M` (into_primitive) or `fuse a, b` (two loops into one)."""

    source: Target
    into: Target
    into_primitive: bool
    position: Position


@dataclass(frozen=True)
class Layout:
    tensor: str
    choices: tuple[tuple[str, ...], ...]
    position: Position


@dataclass(frozen=True)
class Vectorize:
    primitive: str
    dims: tuple[str, ...]
    position: Position


Directive = Split | Reorder | Fuse | Layout | Vectorize


@dataclass(frozen=True)
class Operator:
    name: str
    params: tuple[Param, ...]
    lets: tuple[Let, ...]
    tensors: tuple[TensorDecl, ...]
    compute: tuple[Statement, ...]
    schedule: tuple[Directive, ...]
    position: Position
    requires: tuple[Require, ...] = ()
