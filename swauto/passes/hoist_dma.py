"""DMA hoisting (thesis 5.1.2.3).

Guarantees: starting from algorithm 7's placement, each operand's transfer moves out over some of
its dependent loops (its box grows to cover every iteration of those loops, and the primitive reads
its tile at an offset; every peeled copy of the nest crosses those of the loops it has, as far as
its own box allows: `call_levels`) so that the bytes moved are as few as possible while every buffer still fits
local memory (counting double buffering when it will be applied; the statements of the nest's body, the
peeled copies of its outermost loops, one at a time, each with the transfers only it uses, the transfers
several share beside them all); among placements that move as
few bytes, the one using the least local memory. Where local memory sits behind a cache (the host's
buffers in its L2: `cache_bytes`), a map's buffer beyond it counts its bytes twice (`placement_cost`).
An output tile stays in local memory from its get
to its put: it is hoisted only over loops where `swauto.ir.dependence` proves that no other call
inside that window writes an element of it (its put would overwrite that call's result), and not
at all when calls are fused into it (they run on exactly one call's box). Strided axes are not
hoisted over. The result is what `place_transfers` gives with those placements.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from math import prod

from swauto.errors import Rejected
from swauto.ir.analysis import trip_count
from swauto.ir.dependence import disjoint, loop_ranges
from swauto.ir.nodes import Call, LocalBuffer, Module
from swauto.machine import DTYPE_BYTES, LocalMemoryMachine
from swauto.passes.infer_dma import (
    TransferBox,
    buffer_names,
    call_levels,
    hoistable,
    nest_calls,
    place_transfers,
    statements_of_outside_transfers,
    transfer_box,
)
from swauto.passes.plan_local_memory import aligned, per_cpe_bytes, twin_bytes


class _Boxes:
    """The transfer boxes of the nest's calls (its peeled copies'), each computed once: the options and
    the output windows of every level ask for the same ones again. `segments`: per call, the statement
    of the nest's body that holds it (the peeled copies of its outermost loops run one after another)."""

    def __init__(self, calls: list[tuple[Call, tuple]], segments: list[int]) -> None:
        self.calls = calls
        self.segments = segments
        self.known: dict[tuple[int, str, int], TransferBox] = {}

    def __call__(self, index: int, role: str, level: int) -> TransferBox:
        key = (index, role, level)
        box = self.known.get(key)
        if box is None:
            call, loops = self.calls[index]
            box = self.known[key] = transfer_box(dict(call.transfers)[role], loops, level)
        return box


def _option(scheduled: Module, role: str, level: int, machine: LocalMemoryMachine,
            boxes: _Boxes) -> tuple[int, int]:
    """(bytes moved as `placement_cost` counts them, local bytes per CPE) of operand `role` hoisted over
    `level` dependent loops. The buffers of the statements of the nest's body that run one after another
    are never live at once (`plan_local_memory`): the local bytes are those of the statement that needs
    most, with those of the transfers outside every loop."""
    calls = boxes.calls
    name = buffer_names(calls[0][0])[role]
    placements: dict[tuple, tuple[int, int, int]] = {}  # cost of the bytes moved, buffer bytes, statement
    outside: list[tuple[tuple, int]] = []  # the transfers outside every loop, each with its call's statement
    for index, ((call, loops), levels) in enumerate(zip(calls, call_levels(calls, {role: level}), strict=True)):
        access = dict(call.transfers)[role]
        tensor = scheduled.tensor(access.name)
        box = boxes(index, role, levels[role])
        # Calls whose transfers coincide (same loop, same box and padding) share them.
        key = (None if box.home is None else id(box.home), box.starts, box.extents, access.pad)
        if box.home is None:
            outside.append((key, boxes.segments[index]))
        if key in placements:
            continue
        enclosing = loops[: loops.index(box.home) + 1] if box.home is not None else ()
        trips = prod(trip_count(loop) for loop in enclosing)
        both_ways = role == call.output_role and call.signature.reads_output()
        moved = prod(box.extents) * DTYPE_BYTES[tensor.dtype] * trips * (2 if both_ways else 1)
        pad = access.pad or (0,) * len(box.extents)
        shape = tuple(e + p for e, p in zip(box.extents, pad, strict=True))
        size = aligned(per_cpe_bytes(LocalBuffer(name, shape), machine))
        placements[key] = (placement_cost(moved, size, call, machine), size, boxes.segments[index])
    cost = sum(c for c, _, _ in placements.values())
    # Per statement of the nest's body; None: a transfer outside every loop that calls of several
    # statements share, at the kernel's root (`statements_of_outside_transfers`).
    statement = dict(zip((key for key, _ in outside), statements_of_outside_transfers(outside), strict=True))
    local: dict[int | None, int] = {}
    for key, (_, size, segment) in placements.items():
        where = statement.get(key, segment)
        local[where] = local.get(where, 0) + size
    return cost, local.pop(None, 0) + max(local.values(), default=0)


def placement_cost(moved: int, local: int, call: Call, machine: LocalMemoryMachine) -> int:
    """What a transfer of `call`'s that moves `moved` bytes into a buffer of `local` bytes per CPE costs
    where it is placed: its bytes; twice where the buffer outgrows the cache local memory sits in
    (`cache_bytes`) and `call` is no GEMM: the copy writes it out of the cache and the call reads it back
    from beyond (MobileNetV2 block1.1.depthwise at B = 1 on a Zen 3 with a 512 KiB L2: its whole padded
    input, 1.9 MB, in one copy ran 10 - 21% slower than copies of 10 x 16-pixel tiles moving 1.4 times
    the bytes). A GEMM reads its operands in panels the host model prices where they stream from."""
    if machine.cache_bytes and local > machine.cache_bytes and call.signature.kind != "gemm":
        return 2 * moved
    return moved


def _window_is_private(role: str, level: int, boxes: _Boxes) -> bool:
    """True when every output tile of operand `role` hoisted over `level` loops is disjoint from the
    tiles of every other call inside its window (the loop whose body gets and puts it)."""
    calls = boxes.calls
    if role != calls[0][0].output_role:
        return True  # an input's tile is never written back
    levels = [per_call[role] for per_call in call_levels(calls, {role: level})]
    for index, (call, loops) in enumerate(calls):
        access = dict(call.operands)[role]
        box = boxes(index, role, levels[index])
        for other_index, (other, other_loops) in enumerate(calls):
            if other_index == index:
                continue
            inside = box.home is None or any(loop is box.home for loop in other_loops)
            tile = dict(other.operands)[role]
            if inside and not disjoint(box.starts, box.extents, tile.starts, tile.extents,
                                       loop_ranges((*loops, *other_loops))):
                shared = boxes(other_index, role, levels[other_index])
                if (shared.home is box.home and shared.starts == box.starts and shared.extents == box.extents
                        and tile.pad == access.pad):
                    continue  # the two calls share this transfer and its buffer
                return False
    return True


def hoist_dma(scheduled: Module, machine: LocalMemoryMachine, double_buffered: bool,
              placed: Module | None = None) -> Module:
    """`scheduled` is the IR before any transfer was placed (the input of `infer_dma`); `placed`, if
    given, is `infer_dma(scheduled)`, which this would otherwise compute again."""
    segments, calls = nest_calls(scheduled)
    boxes = _Boxes(calls, segments)
    roles = tuple(role for role, _ in calls[0][0].transfers)
    caps = dict.fromkeys(roles, 0)  # how far each operand can move at most
    fused = any(call.epilogue for call, _ in calls)
    for call, loops in calls:
        for role, access in call.transfers:
            # A tile with fused consumers stays one call's output box: they run on exactly that box.
            if not (fused and role == call.output_role):
                caps[role] = max(caps[role], hoistable(access, loops))
    for role in roles:  # an output tile hoisted as far as no other call writes into its window
        caps[role] = next((level - 1 for level in range(caps[role] + 1)
                           if not _window_is_private(role, level, boxes)), caps[role])
        if caps[role] < 0:
            raise Rejected("overlapping output tiles", f"two calls write overlapping tiles of operand {role} "
                                                       "while both are in local memory")
    options = {role: [_option(scheduled, role, level, machine, boxes) for level in range(caps[role] + 1)]
               for role in roles}
    placed = placed or place_transfers(scheduled, dict.fromkeys(roles, 0))
    # The float64 copies do not depend on where transfers sit: count them once, from any placement.
    copies = twin_bytes(placed, machine)
    levels = cheapest([options[role] for role in roles], machine.ldm_usable_bytes - copies,
                      2 if double_buffered else 1)
    if levels is None or not any(levels):
        return placed
    return place_transfers(scheduled, dict(zip(roles, levels, strict=True)))


def cheapest(options: Sequence[Sequence[tuple[int, int]]], room: int, factor: int) -> tuple[int, ...] | None:
    """Per operand, which of its options (bytes moved, local bytes per CPE) to take: the fewest bytes
    moved in all while `factor` times their local bytes fit in `room` (`factor` 2 for buffers that
    will be double buffered); among those, the least local memory, then the earliest options. None
    when no choice fits. (`swauto.tuner.sketch` chooses its placements with this too.)"""
    best: tuple[int, int, tuple[int, ...]] | None = None
    for picks in itertools.product(*(range(len(per_operand)) for per_operand in options)):
        moved = local = 0
        for per_operand, pick in zip(options, picks, strict=True):
            moved += per_operand[pick][0]
            local += per_operand[pick][1]
        if factor * local <= room and (best is None or (moved, local, picks) < best):
            best = (moved, local, picks)
    return None if best is None else best[2]
