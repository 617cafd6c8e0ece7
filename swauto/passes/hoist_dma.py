"""DMA hoisting (thesis 5.1.2.3).

Guarantees: starting from algorithm 7's placement, an operand's transfer moves over its innermost
dependent loop (its box grows to cover every iteration of that loop, and the primitive reads its
tile at an offset) whenever that reduces the bytes moved and the buffers still fit local memory
(counting double buffering when it will be applied). Greedy: the move (over one or more loops)
that saves the most bytes first, until none helps. The result is what `infer_dma` would give with those placements.
"""

from __future__ import annotations

from swauto.ir.analysis import traffic
from swauto.ir.nodes import Gemm, Module
from swauto.ir.visitor import walk
from swauto.machine import SW26010
from swauto.passes.infer_dma import hoistable, place_transfers
from swauto.passes.plan_local_memory import footprint

MAX_DISTANCE = 4  # loops an operand may cross in one step


def hoist_dma(scheduled: Module, machine: SW26010, double_buffered: bool) -> Module:
    """`scheduled` is the IR before any transfer was placed (the input of `infer_dma`)."""
    levels = {"A": 0, "B": 0, "C": 0}
    caps = dict.fromkeys(levels, 0)  # how far each operand can move at most
    for call, loops in walk(scheduled.body):
        if isinstance(call, Gemm):
            for role, access in call.operands:
                caps[role] = max(caps[role], hoistable(access, loops))
    placed: dict[tuple[int, ...], Module] = {}

    def place(choice: dict[str, int]) -> Module:
        key = tuple(choice.values())
        if key not in placed:
            placed[key] = place_transfers(scheduled, choice)
        return placed[key]

    best = place(levels)
    best_bytes = traffic(best)[0]
    while True:
        options = []
        for role in levels:
            # Moving over one loop may save nothing until the next is crossed too: try each distance.
            for distance in range(1, min(MAX_DISTANCE, caps[role] - levels[role]) + 1):
                trial_levels = {**levels, role: levels[role] + distance}
                trial = place(trial_levels)
                moved = traffic(trial)[0]
                if moved < best_bytes and footprint(trial, machine, double_buffered) <= machine.ldm_usable_bytes:
                    options.append((moved, distance, role, trial))
        if not options:
            return best
        best_bytes, distance, role, best = min(options, key=lambda option: option[:3])
        levels[role] += distance
