"""Facts read off an IR without changing it: trip counts, bytes moved, flops."""

from __future__ import annotations

import functools
import itertools
from math import prod

from swauto.ir import expr as ex
from swauto.ir.nodes import COMPARISONS, Call, Compare, Dma, For, Module
from swauto.ir.visitor import walk
from swauto.machine import DTYPE_BYTES


def trip_count(loop: For, env: dict[str, int] | None = None) -> int:
    """Iterations of `loop` (its bounds must be constant, or constant given `env`)."""
    start, stop = ex.evaluate(loop.start, env or {}), ex.evaluate(loop.stop, env or {})
    return max(0, (stop - start + loop.stride - 1) // loop.stride)


EXECUTIONS_ENUMERATED = 1 << 16  # iterations a group of conditions' loops may have to be counted one by one


def executions(loops: tuple[For, ...], conditions: tuple[Compare, ...]) -> int:
    """How many iterations of `loops` (constant bounds) satisfy every one of `conditions`: the times a
    call guarded by them runs. The loops the conditions name are counted together where conditions link
    them (a row's output tile and kernel tap), group by group; a group of more than EXECUTIONS_ENUMERATED
    iterations is counted as if every condition held (an upper bound)."""
    total = prod(trip_count(loop) for loop in loops)
    if not conditions or not total:
        return total
    named = {loop.var: loop for loop in loops}
    groups: list[tuple[set[str], list[Compare]]] = []
    for condition in conditions:
        names = (ex.free_vars(condition.left) | ex.free_vars(condition.right)) & named.keys()
        linked = [group for group in groups if group[0] & names]
        merged = (names.union(*(g[0] for g in linked)), [condition, *(c for g in linked for c in g[1])])
        groups = [group for group in groups if not group[0] & names] + [merged]
    for names, group in groups:
        ordered = sorted(names)
        ranges = tuple((v, ex.evaluate(named[v].start, {}), ex.evaluate(named[v].stop, {}), named[v].stride)
                       for v in ordered)
        count = prod(len(range(*r[1:])) for r in ranges)
        if ordered and count <= EXECUTIONS_ENUMERATED:
            total = total // count * _held(ranges, tuple(group))
    return total


@functools.lru_cache(maxsize=1 << 12)
def _held(ranges: tuple[tuple[str, int, int, int], ...], conditions: tuple[Compare, ...]) -> int:
    """Points of the grid `ranges` (var, start, stop, stride) where every condition holds."""
    names = [name for name, *_ in ranges]
    tests = [(ex.compiled(c.left), ex.compiled(c.right), COMPARISONS[c.op]) for c in conditions]
    held = 0
    for point in itertools.product(*(range(*r[1:]) for r in ranges)):
        env = dict(zip(names, point, strict=True))
        held += all(compare(left(env), right(env)) for left, right, compare in tests)
    return held


def traffic(module: Module) -> tuple[int, int]:
    """Bytes moved by DMA and flops computed by one run of `module` (loop bounds must be constant)."""
    dma_bytes = flops = 0
    for node, loops in walk(module.body):
        trips = prod(trip_count(loop) for loop in loops)
        if isinstance(node, Dma):
            size = DTYPE_BYTES[module.tensor(node.tensor.name).dtype] * prod(node.tensor.extents)
            dma_bytes += size * trips
        elif isinstance(node, Call):
            flops += node.flops * trips
    return dma_bytes, flops
