"""The primitive registry and the description every primitive gives of itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from math import prod

import numpy as np

# How a primitive's result meets its output box: stored over it, added to it, or kept where larger.
COMBINES = ("", "+", "max")
IDENTITY = {"+": 0.0, "max": -np.inf}

Compute = Callable[[Mapping[str, np.ndarray], float | None], np.ndarray]


@dataclass(frozen=True)
class Primitive:
    """A tensorized primitive: what it computes on tiles, described as data (thesis 6.2.4.1).

    - `dims`: its dimensions, in order; `reduced` those its output does not carry (summed or
      maxed over). An operand that omits a dimension it could carry is broadcast along it
      (`broadcast`), or, for the output of a reduction, reduced over it (`reduces_missing`).
    - `inputs` and `output`: role names with the dimensions each carries (or may carry).
    - `combine`: '' stores the result, '+' adds it to the output, 'max' keeps the larger. A
      primitive that combines can run in pieces over a split of any dimension and in loops that
      do not index its output; a statement that overwrites its output starts those from
      `IDENTITY[combine]` (the `init_outputs` pass).
    - `kind`: the family targets lower it by ('gemm', 'map', 'reduce', 'transform').
    - `compute`: NumPy semantics on views of the operands with one axis per dimension (size 1
      where an operand does not carry it), returning the new output (the combine included).
    - `flops_per_point`: flops per point of the iteration space (the product of all dimensions).
    - `vectorizable`: the dimensions a target may choose to vectorize (empty: the target decides).
    - `constant`: the name of its scalar argument (`scale(..., by = 0.5)`), if it takes one.
    - `cost`: per-target data its lowerings price it by (for a map: the operations per element).
    """

    name: str
    kind: str
    dims: tuple[str, ...]
    inputs: tuple[tuple[str, tuple[str, ...]], ...]
    output: tuple[str, tuple[str, ...]]
    combine: str
    compute: Compute
    flops_per_point: float
    vectorizable: tuple[str, ...] = ()
    broadcast: bool = False
    reduces_missing: bool = False
    constant: str | None = None
    description: str = ""
    cost: Mapping[str, object] | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(role for role, _ in self.inputs) + (self.output[0],)

    @property
    def output_role(self) -> str:
        return self.output[0]

    @property
    def reduced(self) -> tuple[str, ...]:
        carried = set(self.output[1])
        return tuple(d for d in self.dims if d not in carried)

    def role_dims(self, role: str) -> tuple[str, ...]:
        return dict((*self.inputs, self.output))[role]

    def reads_output(self) -> bool:
        """Whether the output box is read as well as written (its old values meet the result)."""
        return self.combine != ""

    def flops(self, sizes: Mapping[str, int]) -> int:
        return round(self.flops_per_point * prod(sizes.get(d, 1) for d in self.dims))


REGISTRY: dict[str, Primitive] = {}


def register(primitive: Primitive) -> Primitive:
    if primitive.combine not in COMBINES:
        raise ValueError(f"primitive {primitive.name}: combine must be one of {COMBINES}")
    REGISTRY[primitive.name] = primitive
    return primitive


def get(name: str) -> Primitive:
    return REGISTRY[name]
