"""Proofs that two boxes of one tensor share no element: what a pass needs before it reorders two
transfers of an output or keeps a tile in local memory while other statements write that tensor.

Every answer is sound: True only when the boxes are disjoint for *every* value of the variables in
their ranges; False whenever that cannot be shown (the caller then keeps the program's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from swauto.ir import expr as ex
from swauto.ir.nodes import For

Ranges = Mapping[str, tuple[int, int]]


def disjoint(starts_a: Sequence[ex.Expr], extents_a: Sequence[int], starts_b: Sequence[ex.Expr],
             extents_b: Sequence[int], ranges: Ranges) -> bool:
    """True when the boxes a and b (of the same array) provably share no element: along some axis,
    the distance between their starts exceeds the extent of the box that comes first, whatever the
    variables' values in `ranges` (inclusive). Variables without a range make an axis unprovable."""
    for start_a, extent_a, start_b, extent_b in zip(starts_a, extents_a, starts_b, extents_b, strict=True):
        if extent_a == extent_b == 1 and _different_residues(start_a, start_b, ranges):
            return True
        try:
            low, high = ex.bounds(start_b - start_a, ranges)
        except (ValueError, KeyError):
            continue
        if low >= extent_a or high <= -extent_b:
            return True
    return False


def _different_residues(a: ex.Expr, b: ex.Expr, ranges: Ranges) -> bool:
    """True for `x % m` and `y % m` where y - x takes no multiple of m in `ranges` (the two halves of a
    double buffer: this iteration's and the next one's, or the one before's)."""
    if not (isinstance(a, ex.BinOp) and isinstance(b, ex.BinOp) and a.op == b.op == "%" and a.right == b.right):
        return False
    modulus = ex.constant_value(a.right)
    if modulus is None or modulus <= 0:
        return False
    try:
        low, high = ex.bounds(ex.simplify(b.left - a.left), ranges)
    except (ValueError, KeyError):
        return False
    return (low - 1) // modulus == high // modulus  # no multiple of the modulus from low to high


def disjoint_anywhere(starts_a: Sequence[ex.Expr], extents_a: Sequence[int], ranges_a: Ranges,
                      starts_b: Sequence[ex.Expr], extents_b: Sequence[int], ranges_b: Ranges) -> bool:
    """True when no box a (its variables in `ranges_a`) meets any box b (its own, independent
    variables in `ranges_b`), even where the two use the same variable names."""
    renamed = {name: ex.Var(name + "'") for name in ranges_b}
    starts_b = [ex.substitute(start, renamed) for start in starts_b]
    ranges = {**ranges_a, **{name + "'": bounds for name, bounds in ranges_b.items()}}
    return disjoint(starts_a, extents_a, starts_b, extents_b, ranges)


def value_ranges(loops: Sequence[For]) -> dict[str, tuple[int, int]]:
    """As `loop_ranges`, and for a loop whose bounds depend on outer loops' variables (a split's inner
    loop over a shorter last tile, until `peel_boundaries`) the least and greatest value it takes over
    all of theirs, where that can be bounded."""
    ranges: dict[str, tuple[int, int]] = {}
    for loop in loops:
        found = loop_range(loop)
        if found is None:
            try:
                found = ex.bounds(loop.start, ranges)[0], ex.bounds(loop.stop, ranges)[1] - 1
            except (ValueError, KeyError):
                continue
        if found[0] <= found[1]:
            ranges[loop.var] = found
    return ranges


def loop_range(loop: For) -> tuple[int, int] | None:
    """The first and last value `loop.var` takes (None when its bounds are not constant or it never runs)."""
    start, stop = ex.constant_value(loop.start), ex.constant_value(loop.stop)
    if start is None or stop is None or loop.stride <= 0 or stop <= start:
        return None
    return start, start + (stop - 1 - start) // loop.stride * loop.stride


def loop_ranges(loops: Sequence[For]) -> dict[str, tuple[int, int]]:
    """The range of each loop of constant bounds in `loops` (loops that never run are left out)."""
    ranges: dict[str, tuple[int, int]] = {}
    for loop in loops:
        found = loop_range(loop)
        if found is not None:
            ranges[loop.var] = found
    return ranges
