"""The first analytic cost and the model tuner."""

from __future__ import annotations

import swauto
from swauto.api import load
from swauto.machine import SUNWAY
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
