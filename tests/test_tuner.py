"""The first analytic cost and the model tuner."""

from __future__ import annotations

import swauto
from swauto.api import load
from swauto.ir.expr import Const
from swauto.ir.nodes import Dma, For
from swauto.ir.visitor import walk
from swauto.machine import SUNWAY, HostScratchpad
from swauto.pipeline import lower
from swauto.schedule.candidate import Candidate
from swauto.tuner.cost_model import estimate, traffic
from swauto.tuner.model_tuner import rank
from swauto.tuner.space import explore

PARAMS = {"M": 512, "N": 512, "K": 512}


def _module(gemm_source, order, vectorize="N", stage="infer_dma"):
    candidate = Candidate((("M", 128), ("N", 256), ("K", 64)), order, vectorize)
    return dict(lower(load(gemm_source, PARAMS), candidate, SUNWAY))[stage]


def test_traffic_counts_every_transfer_times_its_trips(gemm_source):
    # K innermost: C moves once in and once out; A is re-read for each of the 2 N tiles, B for each of the 4 M tiles.
    module = _module(gemm_source, ("M_outer", "N_outer", "K_outer"))
    dma_bytes, flops = traffic(module)
    assert flops == 2 * 512**3
    assert dma_bytes == 4 * (2 * 512 * 512 + 2 * 512 * 512 + 4 * 512 * 512)


def test_k_outermost_moves_c_every_k_step(gemm_source):
    inner = traffic(_module(gemm_source, ("M_outer", "N_outer", "K_outer")))[0]
    outer = traffic(_module(gemm_source, ("K_outer", "M_outer", "N_outer")))[0]
    assert outer > inner


def test_hoisting_only_ever_reduces_traffic(gemm_source):
    for order in (("M_outer", "N_outer", "K_outer"), ("N_outer", "K_outer", "M_outer")):
        placed = traffic(_module(gemm_source, order))[0]
        hoisted = traffic(_module(gemm_source, order, stage="hoist_dma"))[0]
        assert hoisted <= placed
    # K innermost re-reads each A row panel for both N tiles: hoisting A over K reads it once per M tile.
    assert traffic(_module(gemm_source, ("M_outer", "N_outer", "K_outer"), stage="hoist_dma"))[0] < placed


def test_estimate_overlaps_memory_and_compute_only_when_double_buffered(gemm_source):
    op = load(gemm_source, PARAMS)
    order = ("M_outer", "N_outer", "K_outer")
    for double_buffer in (False, True):
        stages = lower(op, Candidate((("M", 128), ("N", 256), ("K", 64)), order, "N", (), double_buffer), SUNWAY)
        predicted = estimate(stages, "sw26010")
        # the thesis' model (issue 4): at least the bytes over peak bandwidth, the flops over peak
        assert predicted.memory_seconds > predicted.dma_bytes / SUNWAY.peak_bandwidth
        assert predicted.compute_seconds > predicted.flops / SUNWAY.peak_flops
        combine = max if double_buffer else sum
        assert predicted.seconds == combine((predicted.memory_seconds, predicted.compute_seconds))


def test_rank_orders_by_predicted_time_then_traffic(gemm_source):
    ranked = rank(explore(load(gemm_source, PARAMS), SUNWAY), "sw26010")
    keys = [(r.estimate.seconds, r.estimate.dma_bytes) for r in ranked]
    assert keys == sorted(keys)
    assert swauto.compile(gemm_source, PARAMS, target="sw26010").schedule == ranked[0].candidate


def test_a_peeled_copys_transfers_outside_every_loop_open_its_own_statement(gemm_source):
    """GEMM 512 x 448 x 1152 in tiles of 128 x 256 x 256, the M tiles' loop outside K's: N's last tile
    (192) and K's (128) run in peeled copies. Hoisted over K, B's boxes of the main N tiles (1 MB and 128
    KB) sit in the N loop, those of the peeled N copy (768 and 96 KB) outside every loop: they open that
    copy (live while it runs), so B fits a 2 MiB local memory hoisted out of the M loop, where counted
    beside the N loop's at the kernel's root they stayed inside it, moved again for every M tile."""
    machine = HostScratchpad(ldm_bytes=2 << 20)
    params = {"M": 512, "N": 448, "K": 1152}
    candidate = Candidate((("M", 128), ("N", 256), ("K", 256)), ("N_outer", "M_outer", "K_outer"), "N")
    module = dict(lower(load(gemm_source, params), candidate, machine))["hoist_dma"]
    gets = [(node, loops) for node, loops in walk(module.body)
            if isinstance(node, Dma) and node.tensor.name == "B"]
    assert gets and all("M_outer" not in [loop.var for loop in loops] for _, loops in gets)
    body = module.body.stmts
    main = next(index for index, stmt in enumerate(body) if isinstance(stmt, For) and stmt.var == "N_outer")
    peeled = [index for index, stmt in enumerate(body)
              if isinstance(stmt, Dma) and stmt.tensor.name == "B" and Const(256) in stmt.tensor.starts]
    assert peeled and all(index > main for index in peeled)
