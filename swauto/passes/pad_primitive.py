"""Lightweight zero padding: the second half of boundary handling (thesis 4.2.4, 6.2.4.5).

Guarantees: every primitive call has sizes the primitive accepts (the vectorized dimension a
multiple of 128, the other free one of 32, K of 8, from the machine description). A call whose
size is not is padded: the axes carrying that dimension in each operand get `pad` zeros after their
valid elements, as few in all as make the dimension's size a multiple (an odd batch of 33 under one
output column: the batch axis to 64, not the column axis to 32 columns; 7 x 7 output pixels: both
axes to 8, M = 64, where either alone would take 7 x 32 = 224). Only the tile in local memory
grows; nothing is copied in main memory. The operands carrying a dimension split it over the same
extents, apart from axes of extent 1 (left unpadded), so each pads them alike and the dimension's
index splits over them the same way (checked). Calls whose sizes are accepted (full tiles,
remainders that happen to fit: primitive switching) are left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from itertools import product
from math import prod

from swauto.ir.nodes import Access, Call, Module
from swauto.ir.visitor import Rewriter
from swauto.machine import LocalMemoryMachine


def multiples(machine: LocalMemoryMachine, vectorize: str) -> dict[str, int]:
    """What each GEMM dimension's size must be a multiple of, with `vectorize` the vectorized one."""
    constraints = machine.gemm
    other = "N" if vectorize == "M" else "M"
    return {vectorize: constraints.vectorized_multiple, other: constraints.other_multiple, "K": constraints.k_multiple}


@lru_cache(maxsize=1024)
def _padded(extents: tuple[int, ...], multiple: int) -> tuple[int, ...]:
    """The extents padded so that their product is a multiple of `multiple`, with the smallest product.
    Each is padded to a multiple of a divisor of `multiple` (no other extent makes a product smaller
    that a divisor's does not); on a tie, the fewest padded extents, then the outermost (one extent
    where one suffices). Cached: the search takes up to a third of a millisecond, and every lowering
    of a space pads the same few tiles."""
    divisors = [d for d in range(1, multiple + 1) if multiple % d == 0]
    choices = [sorted({-(-extent // d) * d for d in divisors}) for extent in extents]
    return min(product(*choices), key=lambda padded: (
        prod(padded) % multiple != 0, prod(padded),
        [p != e for p, e in zip(padded, extents, strict=True)].count(True),
        [axis for axis, (p, e) in enumerate(zip(padded, extents, strict=True)) if p != e]))


def _pad(operands: Mapping[str, Access], dim: str, multiple: int) -> tuple[dict[str, Access], int]:
    """The operands carrying `dim`, padded so that it is a multiple of `multiple`, and its padded size.

    They split the dimension over the same extents apart from axes of extent 1, which stay unpadded:
    so its index splits over the padded axes the same way in every operand. A dimension of size 1 pads
    each operand's outermost axis carrying it (its one element comes first either way)."""
    carriers = {name: access for name, access in operands.items() if dim in access.dims}
    splits = {tuple(int(e) for e, d in zip(a.extents, a.dims, strict=True) if d == dim and e != 1)
              for a in carriers.values()}
    assert len(splits) == 1, f"the operands split {dim} differently: {splits}"
    extents = splits.pop()
    if prod(extents) % multiple == 0:
        return carriers, prod(extents)
    padded = _padded(extents, multiple) if extents else (multiple,)
    for name, access in carriers.items():
        axes = [axis for axis, d in enumerate(access.dims) if d == dim and (access.extents[axis] != 1 or not extents)]
        pad = list(access.pad or (0,) * len(access.extents))
        for axis, new in zip(axes, padded, strict=False):  # a size-1 dimension: its outermost axis
            pad[axis] += new - int(access.extents[axis])
        carriers[name] = replace(access, pad=tuple(pad))
    return carriers, prod(padded)


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
            padded, sizes[dim] = _pad(operands, dim, multiple)
            operands.update(padded)
        return call.with_sizes(sizes).with_operands(lambda role, _: operands[role])


def pad_primitive(module: Module, machine: LocalMemoryMachine) -> Module:
    return replace(module, body=_Pad(machine).rewrite(module.body))
