"""DMA hoisting (thesis 5.1.2.3).

Guarantees: starting from algorithm 7's placement, an operand's transfer moves over its innermost
dependent loop (its box grows to cover every iteration of that loop, and the primitive reads its
tile at an offset) whenever that reduces the bytes moved and the buffers still fit local memory
(counting double buffering when it will be applied). Greedy: the move that saves the most bytes
first, until none helps. The result is what `infer_dma` would give with those placements.
"""

from __future__ import annotations

from swauto.ir.analysis import traffic
from swauto.ir.nodes import Module
from swauto.machine import SW26010
from swauto.passes.infer_dma import place_transfers
from swauto.passes.plan_local_memory import footprint


def hoist_dma(scheduled: Module, machine: SW26010, double_buffered: bool) -> Module:
    """`scheduled` is the IR before any transfer was placed (the input of `infer_dma`)."""
    levels = {"A": 0, "B": 0, "C": 0}
    best = place_transfers(scheduled, levels)
    best_bytes = traffic(best)[0]
    while True:
        options = []
        for role in levels:
            trial_levels = {**levels, role: levels[role] + 1}
            trial = place_transfers(scheduled, trial_levels)
            moved = traffic(trial)[0]
            if moved < best_bytes and footprint(trial, machine, double_buffered) <= machine.ldm_usable_bytes:
                options.append((moved, role, trial))
        if not options:
            return best
        best_bytes, role, best = min(options, key=lambda option: option[:2])
        levels[role] += 1
