"""Element-wise maps and reductions over tiles (thesis 5.3: memory-bound operators).

A map applies a scalar function to every point of its dimensions M and N: `Z = f(X, Y, c)`, inputs
broadcast along the dimensions they do not carry. A reduction `Z ⊕= reduce(X)` sums, or keeps the
largest, of its input over the dimensions its output does not carry; in loops that do not index
its output it reduces over those loops too (pooling windows). Each function is a small expression
tree (`Scalar`) that NumPy, the host's LLVM lowering and the SW26010's instruction count all read,
so adding one is one `_map` line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from swauto.primitives.registry import Primitive, register

if TYPE_CHECKING:
    from swauto.ir.nodes import Call
    from swauto.machine import SW26010

# A scalar function: 'x', 'y' (the inputs), 'c' (the constant argument), a number, or (op, *args).
Scalar = str | float | tuple

UNARY = {"neg": np.negative, "exp": np.exp, "tanh": np.tanh}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum}

# SW26010 vector instructions (4 lanes) per operation: one P0 issue each, except the transcendental
# functions and division, which are software sequences (assumptions: a degree-6 polynomial with range
# reduction for exp, exp-based for tanh, Newton iterations for division).
SW26010_OPS = {"neg": 1, "add": 1, "sub": 1, "mul": 1, "max": 1, "min": 1, "div": 8, "exp": 12, "tanh": 16}


def evaluate(scalar: Scalar, x: np.ndarray | None, y: np.ndarray | None, c: float | None) -> np.ndarray | float:
    """The value of `scalar` on NumPy arrays (broadcasting)."""
    if isinstance(scalar, str):
        return {"x": x, "y": y, "c": c}[scalar]  # type: ignore[return-value]
    if isinstance(scalar, float | int):
        return float(scalar)
    op, *args = scalar
    values = [evaluate(arg, x, y, c) for arg in args]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return (UNARY[op] if len(values) == 1 else BINARY[op])(*values)


def operations(scalar: Scalar) -> list[str]:
    """The operations of `scalar`, one per node."""
    if not isinstance(scalar, tuple):
        return []
    return [scalar[0], *(op for arg in scalar[1:] for op in operations(arg))]


def _map(name: str, function: Scalar, inputs: tuple[str, ...], constant: str | None = None,
         description: str = "", combine: str = "") -> Primitive:
    """A map `Z = f(X, Y, c)`; with `combine` '+', `Z += f(X, Y, c)` (its add one more operation)."""
    def compute(views: Mapping[str, np.ndarray], value: float | None) -> np.ndarray:
        out = views["Z"]
        result = np.broadcast_to(np.asarray(evaluate(function, views.get("X"), views.get("Y"), value),
                                            dtype=np.float64), out.shape)
        return out + result if combine == "+" else result

    ops = operations(function) + (["add"] if combine == "+" else [])
    return register(Primitive(
        name=name, kind="map", dims=("M", "N"),
        inputs=tuple((role, ("M", "N")) for role in inputs), output=("Z", ("M", "N")), combine=combine,
        compute=compute, flops_per_point=len(ops), broadcast=True, constant=constant,
        description=description, cost={"function": function, "sw26010_p0": sum(SW26010_OPS[op] for op in ops)},
    ))


def _reduce(name: str, combine: str, description: str) -> Primitive:
    reducer = np.add.reduce if combine == "+" else np.maximum.reduce

    def compute(views: Mapping[str, np.ndarray], value: float | None) -> np.ndarray:
        x, out = views["X"], views["Z"]
        axes = tuple(axis for axis, (n, m) in enumerate(zip(x.shape, out.shape, strict=True)) if m == 1 and n > 1)
        reduced = reducer(x, axis=axes, keepdims=True) if axes else x
        return out + reduced if combine == "+" else np.maximum(out, reduced)

    return register(Primitive(
        name=name, kind="reduce", dims=("M", "N"), inputs=(("X", ("M", "N")),), output=("Z", ("M", "N")),
        combine=combine, compute=compute, flops_per_point=1, reduces_missing=True, description=description,
        cost={"function": ("add" if combine == "+" else "max", "x", "y"), "sw26010_p0": 1},
    ))


COPY = _map("copy", "x", ("X",), description="Z = X")
FILL = _map("fill", "c", (), "value", "Z = value")
SCALE = _map("scale", ("mul", "x", "c"), ("X",), "by", "Z = X * by")
RELU = _map("relu", ("max", "x", 0.0), ("X",), description="Z = max(X, 0)")
CLAMP = _map("clamp", ("min", ("max", "x", 0.0), "c"), ("X",), "upper", "Z = min(max(X, 0), upper)")  # ReLU6
SIGMOID = _map("sigmoid", ("div", 1.0, ("add", 1.0, ("exp", ("neg", "x")))), ("X",),
               description="Z = 1 / (1 + exp(-X))")
TANH = _map("tanh", ("tanh", "x"), ("X",), description="Z = tanh(X)")
EXP = _map("exp", ("exp", "x"), ("X",), description="Z = exp(X)")
ADD = _map("add", ("add", "x", "y"), ("X", "Y"), description="Z = X + Y")
SUB = _map("sub", ("sub", "x", "y"), ("X", "Y"), description="Z = X - Y")
MUL = _map("mul", ("mul", "x", "y"), ("X", "Y"), description="Z = X * Y")
DIV = _map("div", ("div", "x", "y"), ("X", "Y"), description="Z = X / Y")
MAX = _map("max", ("max", "x", "y"), ("X", "Y"), description="Z = max(X, Y)")
# A multiply-accumulate (a depthwise convolution's tap): the add is counted apart from the multiply
# (no fused multiply-add is assumed of the SW26010's vector unit for maps).
MACC = _map("macc", ("mul", "x", "y"), ("X", "Y"), description="Z += X * Y", combine="+")
REDUCE_SUM = _reduce("reduce_sum", "+", "Z += the sum of X over the dimensions Z does not carry")
REDUCE_MAX = _reduce("reduce_max", "max", "Z = max(Z, the largest X over the dimensions Z does not carry)")


def vector_instructions(primitive: Primitive, sizes: dict[str, int], carried: dict[str, tuple[str, ...]],
                        lanes: int) -> tuple[float, float]:
    """(P0, P1) vector instructions of one call of a map or reduction over the whole tile: P0 the
    arithmetic (`sw26010_p0` per point), P1 the loads and stores (every input point loaded, every
    output point stored, and loaded first when the result combines into it). `carried` gives each
    role the dimensions its operand carries (a broadcast input is loaded once per point it has)."""
    def points(dims: tuple[str, ...]) -> int:
        count = 1
        for dim in dims:
            count *= sizes.get(dim, 1)
        return count

    p0 = points(primitive.dims) * float(primitive.cost["sw26010_p0"]) / lanes  # type: ignore[index, arg-type]
    loads = sum(points(carried[role]) for role, _ in primitive.inputs)
    out = points(carried[primitive.output[0]])
    p1 = (loads + out * (2 if primitive.reads_output() else 1)) / lanes
    return p0, p1


def map_cycles(call: Call, machine: SW26010) -> float:
    """Cycles of one call of a map, reduction or transform on the SW26010 mesh: data-parallel over the
    CPEs, each on its share of the tile in local memory (thesis 5.3), one P0 and one P1 vector
    instruction issued per cycle, plus entering and leaving the call. The timed simulator charges
    this and the thesis-style model prices it: both read the instruction counts the primitive and
    the machine description declare."""
    sizes = {dim: int(value) for dim, value in call.sizes}
    # A dimension carried by several axes (loops fused into it) counts once: its size is the whole.
    carried = {role: tuple(dict.fromkeys(d for d in access.dims if d is not None)) for role, access in call.operands}
    p0, p1 = vector_instructions(call.signature, sizes, carried, machine.vector_lanes)
    return machine.map_call_overhead_cycles + max(p0, p1) / machine.cpes
