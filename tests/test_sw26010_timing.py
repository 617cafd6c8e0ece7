"""The timed SW26010 simulator: DMA transaction geometry, overlap of double-buffered transfers with
compute, exactness of the fast timing mode, and independence from the tuner's model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gemm_inputs
from swauto.api import load
from swauto.backends.sw26010 import gemm_cycles, simulate, time_module
from swauto.backends.sw26010.dma import block_waste, lines_touched, transfer_cost
from swauto.errors import Rejected
from swauto.ir import expr as ex
from swauto.ir.nodes import Access, Call, Compare, Dma, DmaWait, For, If, LocalBuffer, Module, Seq, Tensor, gemm_call
from swauto.machine import SUNWAY
from swauto.pipeline import lower
from swauto.schedule.space import candidates
from swauto.tuner.space import explore

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("start", "size", "lines", "waste"), [
    (0, 128, 1, 0), (0, 16, 1, 112), (120, 16, 2, 240), (64, 128, 2, 128), (128, 256, 2, 0), (4, 1024, 9, 128),
])
def test_transaction_waste_follows_start_address_and_size(start, size, lines, waste):
    assert lines_touched(start, size) == lines
    assert block_waste(start, size) == waste


def test_mesh_spreads_rows_over_columns_and_rounds_each_piece():
    # 4 rows of 256 floats: each row is 8 pieces of 128 B, one per mesh column.
    aligned = transfer_cost((4, 256), (4, 256), 0, 4, SUNWAY)
    assert (aligned.blocks, aligned.bytes, aligned.transactions) == (32, 4096, 32)
    shifted = transfer_cost((4, 256), (4, 256), 4, 4, SUNWAY)  # 4 bytes past a line: every piece spans 2
    assert shifted.transactions == 64 and shifted.service_cycles > aligned.service_cycles
    # A row whose length the columns do not divide moves whole: one block per row.
    assert transfer_cost((4, 100), (4, 100), 0, 4, SUNWAY).blocks == 4


def _pipeline(trips: int, rows: int, gemm_k: int, double: bool) -> Module:
    """A loop reading `trips` tiles of X (rows x 256 floats each) and calling a GEMM of K = gemm_k per
    tile; double buffered (the next tile's get issued before the GEMM) or not."""
    x = Tensor("X", (trips * rows, 256))
    tile = LocalBuffer("X_tile", (2, rows, 256))
    i = ex.Var("i")

    def get(index: ex.Expr) -> Dma:
        return Dma("get", Access("X", (index * rows, ex.Const(0)), (rows, 256), (None, None)),
                   Access("X_tile", (index % 2, ex.Const(0), ex.Const(0)), (1, rows, 256), (None, None, None)),
                   "ready")

    # The GEMM reads the half this iteration's tile arrived in (the checks refuse a race with the prefetch).
    operand = Access("X_tile", (i % 2, ex.Const(0), ex.Const(0)), (1, rows, 256), (None, "M", "K"))
    gemm = gemm_call(128, 128, gemm_k, operand, operand, operand, "M")
    if double:
        body = Seq((DmaWait("ready"), If(Compare("<", i + 1, ex.Const(trips)), get(i + 1)), gemm))
        program = Seq((get(ex.Const(0)), For("i", ex.Const(0), ex.Const(trips), 1, body)))
    else:
        program = For("i", ex.Const(0), ex.Const(trips), 1, Seq((get(i), DmaWait("ready"), gemm)))
    return Module("pipeline", (x,), (tile,), program)


def _dma_cycles(rows: int) -> float:
    return SUNWAY.dma_latency_cycles + transfer_cost((64 * rows, 256), (rows, 256), 0, 4, SUNWAY).service_cycles


@pytest.mark.parametrize("rows", [8, 128])
def test_double_buffering_hides_the_shorter_of_transfer_and_compute(rows):
    trips, k = 64, 64
    transfer, compute = _dma_cycles(rows), gemm_cycles(128, 128, k, "M", SUNWAY)
    doubled = time_module(_pipeline(trips, rows, k, double=True), SUNWAY).cycles
    single = time_module(_pipeline(trips, rows, k, double=False), SUNWAY).cycles
    assert doubled == pytest.approx(trips * max(transfer, compute), rel=0.05)
    assert single == pytest.approx(trips * (transfer + compute), rel=0.05)
    assert (compute > transfer) == (rows == 8)  # the two cases: compute-bound, then DMA-bound


@pytest.mark.parametrize("params", [
    {"M": 1024, "N": 512, "K": 256},
])
def test_fast_timing_mode_equals_stepping_through_every_iteration(params):
    space = explore(load(ROOT / "examples" / "gemm.sw", params), SUNWAY)
    for _, stages in space.legal[::37]:
        module = stages[-1][1]
        fast, exact = time_module(module, SUNWAY), time_module(module, SUNWAY, extrapolate=False)
        assert fast.cycles == pytest.approx(exact.cycles, rel=1e-9)
        assert fast.stats == pytest.approx(exact.stats, rel=1e-9)


def test_fast_timing_mode_is_exact_on_a_padded_strided_convolution():
    params = {"B": 32, "Ni": 64, "No": 64, "Ri": 12, "Ci": 12, "Kr": 5, "Kc": 5, "stride": 1, "pad": 2}
    op = load(ROOT / "examples" / "conv2d.sw", params)
    for candidate in list(candidates(op))[::41]:
        try:
            module = lower(op, candidate, SUNWAY)[-1][1]
        except Rejected:
            continue
        assert time_module(module, SUNWAY).cycles == pytest.approx(
            time_module(module, SUNWAY, extrapolate=False).cycles, rel=1e-9)


def test_functional_run_is_timed_like_the_timing_mode():
    m, n, k = 256, 128, 64
    space = explore(load(ROOT / "examples" / "gemm.sw", {"M": m, "N": n, "K": k}), SUNWAY)
    for _, stages in space.legal[::11]:
        module = stages[-1][1]
        counters = simulate(module, gemm_inputs(m, n, k), SUNWAY)
        timing = time_module(module, SUNWAY)
        assert counters.seconds == pytest.approx(timing.seconds, rel=1e-9)
        assert counters.dma_transactions == timing.stats["dma_transactions"]
        assert counters.dma_get_bytes == timing.stats["dma_get_bytes"]


def test_short_k_is_slow_and_long_k_near_peak():
    def efficiency(k: int) -> float:
        return 2 * 256 * 128 * k / (gemm_cycles(256, 128, k, "M", SUNWAY) / SUNWAY.clock_hz) / SUNWAY.peak_flops

    assert efficiency(8) < 0.6 < 0.9 < efficiency(512) < 1


def test_the_simulator_never_imports_the_tuner():
    # The simulator's own modules; `target.py` registers the target, which ties the simulator (the
    # "hardware") to the thesis' model that is judged against it, and is not imported by them.
    for path in (ROOT / "backends" / "sw26010").glob("*.py"):
        if path.name != "target.py":
            assert "swauto.tuner" not in path.read_text(), path
    code = ("import sys, swauto.backends.sw26010 as b; b.simulate; "
            "print(sorted(m for m in sys.modules if m.startswith('swauto.tuner')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_data_parallel_transfer_moves_the_boxs_contiguous_runs():
    """A [4, 56, 64, 32] box of a [56, 56, 64, 32] tensor is one contiguous run: spread flat over the
    CPEs it is 64 blocks of 28 KiB; as the GEMM's mesh rows it is 57,344 blocks of 16 bytes."""
    mesh = transfer_cost((56, 56, 64, 32), (4, 56, 64, 32), 0, 4, SUNWAY)
    flat = transfer_cost((56, 56, 64, 32), (4, 56, 64, 32), 0, 4, SUNWAY, flat=True)
    assert flat.bytes == mesh.bytes == 4 * 56 * 64 * 32 * 4
    assert (flat.blocks, mesh.blocks) == (64, 4 * 56 * 64 * 8)
    assert flat.service_cycles < mesh.service_cycles / 4


def test_a_map_over_a_fused_dimension_costs_its_points_once():
    """Loops fused into a map's dimension make several axes carry it; the points are the
    dimension's size, not its size once per axis."""
    from swauto.machine import SUNWAY as machine
    from swauto.primitives.elementwise import map_cycles

    def relu(dims: tuple) -> float:
        box = Access("x", (ex.Const(0),) * len(dims), (4, 8, 16)[: len(dims)], dims)
        return map_cycles(Call("relu", (("M", 32), ("N", 16)), (("X", box), ("Z", box))), machine)

    assert relu(("M", "M", "N")) == relu((None, "M", "N"))
