"""Lightweight zero padding: the second half of boundary handling (thesis 4.2.4, 6.2.4.5).

Guarantees: every primitive call has sizes the primitive accepts (the vectorized dimension a
multiple of 128, the other free one of 32, K of 8, from the machine description). A call whose
size is not is padded: of the axes carrying that dimension in each operand, the one whose padding
adds the fewest elements (an odd batch of 33 under one output column: the batch axis to 64, not
the column axis to 32 columns) gets `pad` zeros after its valid elements, so only the tile in local
memory grows; nothing is copied in main memory. Calls whose sizes are accepted (full tiles,
remainders that happen to fit: primitive switching) are left as they are.
"""

from __future__ import annotations

from dataclasses import replace
from math import gcd, prod

from swauto.ir.nodes import Access, Call, Module
from swauto.ir.visitor import Rewriter
from swauto.machine import LocalMemoryMachine


def multiples(machine: LocalMemoryMachine, vectorize: str) -> dict[str, int]:
    """What each GEMM dimension's size must be a multiple of, with `vectorize` the vectorized one."""
    constraints = machine.gemm
    other = "N" if vectorize == "M" else "M"
    return {vectorize: constraints.vectorized_multiple, other: constraints.other_multiple, "K": constraints.k_multiple}


def _padding(access: Access, dim: str, multiple: int) -> tuple[int, int] | None:
    """(axis, zeros) that make `dim` a multiple of `multiple` in `access` with the fewest padded
    elements (the outermost such axis on a tie), or None if it already is."""
    axes = [axis for axis, carried in enumerate(access.dims) if carried == dim]
    size = prod(access.extents[axis] for axis in axes)
    if size % multiple == 0:
        return None
    options = []
    for axis in axes:
        others = size // access.extents[axis]
        step = multiple // gcd(multiple, others)
        zeros = -(-access.extents[axis] // step) * step - access.extents[axis]
        options.append(((access.extents[axis] + zeros) * others, axis, zeros))
    _, axis, zeros = min(options)
    return axis, zeros


class _Pad(Rewriter):
    def __init__(self, machine: LocalMemoryMachine) -> None:
        self.machine = machine

    def rewrite_Call(self, call: Call) -> Call:
        if call.signature.kind != "gemm":
            return call  # maps and reductions take any size
        assert call.vectorize is not None, "pad_primitive runs after vectorization is chosen"
        operands = dict(call.operands)
        sizes = dict(call.sizes)
        for dim, multiple in multiples(self.machine, call.vectorize).items():
            for name, access in operands.items():
                if dim not in access.dims:
                    continue
                padding = _padding(access, dim, multiple)
                if padding is None:
                    continue
                axis, zeros = padding
                pad = list(access.pad or (0,) * len(access.extents))
                pad[axis] += zeros
                operands[name] = replace(access, pad=tuple(pad))
            carrier = next(a for a in operands.values() if dim in a.dims)
            sizes[dim] = prod(e for e, d in zip(carrier.padded_extents(), carrier.dims, strict=True) if d == dim)
        return call.with_sizes(sizes).with_operands(lambda role, _: operands[role])


def pad_primitive(module: Module, machine: LocalMemoryMachine) -> Module:
    return replace(module, body=_Pad(machine).rewrite(module.body))
