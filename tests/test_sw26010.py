"""The simulated SW26010: every legal candidate computes C + A B; the simulator enforces the machine."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import gemm_inputs, gemm_reference, relative_error
from swauto.api import load
from swauto.backends.sw26010 import emit_program, simulate
from swauto.errors import SimulationError
from swauto.ir import expr as ex
from swauto.ir.memory import gather_window
from swauto.ir.nodes import Access, Call, Dma, DmaWait, LocalBuffer, Module, Seq, Tensor
from swauto.ir.visitor import Rewriter, walk
from swauto.machine import SUNWAY
from swauto.passes.plan_local_memory import per_cpe_bytes
from swauto.pipeline import before_double_buffering, lower
from swauto.schedule.candidate import Candidate
from swauto.tuner.cost_model import traffic
from swauto.tuner.space import explore

SHAPES = [(128, 128, 64), (256, 384, 128), (384, 128, 96), (200, 160, 72)]  # the last one no tile divides


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_every_candidate_matches_numpy(gemm_source, m, n, k):
    space = explore(load(gemm_source, {"M": m, "N": n, "K": k}), SUNWAY)
    arrays = gemm_inputs(m, n, k)
    expected = gemm_reference(arrays)
    assert space.legal
    for candidate, stages in space.legal:
        module = stages[-1][1]
        c = arrays["C"].copy()
        counters = simulate(module, {**arrays, "C": c}, SUNWAY)
        assert relative_error(c, expected) <= 1e-5, candidate
        dma_bytes, flops = traffic(before_double_buffering(stages))
        assert counters.flops == flops >= 2 * m * n * k  # more where a boundary tile is padded
        assert counters.dma_get_bytes + counters.dma_put_bytes == dma_bytes, candidate


def _final(gemm_source, stage="plan_local_memory", machine=SUNWAY):
    op = load(gemm_source, {"M": 256, "N": 256, "K": 128})
    candidate = Candidate((("M", 128), ("N", 128), ("K", 64)), ("M_outer", "N_outer", "K_outer"), "N")
    return dict(lower(op, candidate, machine))[stage]


def test_transactions_of_aligned_rows(gemm_source):
    """Tiles of 128 floats per row split into 8 CPE pieces of 64 B: each piece is half a 128-B line
    (on a machine that never exchanges transfers, which would move the A tile's rows whole)."""
    module = _final(gemm_source, machine=replace(SUNWAY, exchange_min_gain=0.0))
    arrays = gemm_inputs(256, 256, 128)
    counters = simulate(module, arrays, SUNWAY)
    # A tile rows are 64 floats = 256 B -> 8 pieces of 32 B; B and C tile rows 128 floats -> 8 x 64 B.
    # Every piece lies inside one 128-byte line, so each costs exactly one transaction.
    pieces = 0
    for stmt in _dmas(module.body):
        rows = stmt.tensor.extents[0]
        pieces += rows * 8 * _trips(module, stmt)
    assert counters.dma_transactions == pieces


def _dmas(stmt):
    from swauto.ir.visitor import walk

    return [node for node, _ in walk(stmt) if isinstance(node, Dma)]


def _trips(module, dma):
    from swauto.ir.visitor import walk

    for node, loops in walk(module.body):
        if node is dma:
            return int(np.prod([ex.evaluate(loop.stop, {}) for loop in loops]))
    raise AssertionError


class _ShiftDma(Rewriter):
    def rewrite_Dma(self, stmt):
        access = stmt.tensor
        return replace(stmt, tensor=replace(access, starts=(access.starts[0] + 64,) + access.starts[1:]))


def test_out_of_range_dma_names_the_transfer(gemm_source):
    module = _final(gemm_source, "infer_dma")
    broken = replace(module, body=_ShiftDma().rewrite(module.body))
    expected = r"DMA out of bounds: dma get B\[K_outer \* 64 \+ 64:\+64, .*K_outer=1\) touches tensor B axis 0 at 128"
    with pytest.raises(SimulationError, match=expected):
        simulate(broken, gemm_inputs(256, 256, 128), SUNWAY)


def test_local_memory_capacity_is_enforced(gemm_source):
    module = _final(gemm_source)
    huge = LocalBuffer("spill", (64 * 16 * 1024,), "float32", offset=None)
    with pytest.raises(SimulationError, match="needs .* B of local memory per CPE"):
        simulate(replace(module, buffers=module.buffers + (huge,)), gemm_inputs(256, 256, 128), SUNWAY)


class _DropWaits(Rewriter):
    def rewrite_Seq(self, stmt):
        return Seq(tuple(self.rewrite(s) for s in stmt.stmts if not isinstance(s, DmaWait)))


def test_primitive_may_not_read_a_buffer_in_flight(gemm_source):
    module = _final(gemm_source)
    racy = replace(module, body=_DropWaits().rewrite(module.body))
    with pytest.raises(SimulationError, match="before its DMA was waited for"):
        simulate(racy, gemm_inputs(256, 256, 128), SUNWAY)


def test_program_text_lists_buffers_and_calls(gemm_source):
    code = emit_program(_final(gemm_source), SUNWAY)
    assert "__thread_local float A_tile[256]; /* tile 128x128, LDM offset 0 */" in code  # hoisted over K
    assert "dma_get(C_tile, C + M_outer * 32768 + N_outer * 128, /* block */ 512, /* stride */ 1024" in code
    assert "gemm_op(M=128, N=128, K=64, A=A_tile/MK, B=B_tile/KN, C=C_tile/MN, vec=N);" in code


def test_lightweight_padding_moves_no_extra_bytes(gemm_source):
    """Boundary tiles the primitive cannot take are padded in local memory only: the DMAs move exactly
    the valid elements (the thesis' auxiliary strips would add O(M + K) bytes; a full padded copy
    O(M K))."""
    m = n = k = 200
    op = load(gemm_source, {"M": m, "N": n, "K": k})
    candidate = Candidate((("M", 128), ("N", 128), ("K", 64)), ("M_outer", "N_outer", "K_outer"), "N")
    stages = lower(op, candidate, SUNWAY)
    final = stages[-1][1]
    padded = [access for node, _ in walk(final.body) if isinstance(node, Call)
              for _, access in node.operands if access.pad and any(access.pad)]
    assert padded, "this candidate needs padding: 200 = 128 + 72 and N is vectorized (72 is not a multiple of 128)"
    arrays = gemm_inputs(m, n, k)
    expected = gemm_reference(arrays)
    counters = simulate(final, arrays, SUNWAY)
    assert relative_error(arrays["C"], expected) <= 1e-5
    # Each A tile is read once per N tile, each B tile once per M tile, C read and written once.
    valid = 4 * (m * k * 2 + k * n * 2 + 2 * m * n)
    hoisted = traffic(before_double_buffering(stages))[0]
    assert counters.dma_get_bytes + counters.dma_put_bytes == hoisted <= valid


def _sharing_candidate(gemm_source):
    """A GEMM no tile divides: its peeled copies run one after another, and their buffers share local
    memory. Returns the operator, the final IR of the first such candidate, and two buffers sharing bytes."""
    op = load(gemm_source, {"M": 200, "N": 160, "K": 72})
    for _, stages in explore(op, SUNWAY).legal:
        final = stages[-1][1]
        spans = {b.name: (b.offset, b.offset + per_cpe_bytes(b, SUNWAY)) for b in final.buffers if b.copy_of is None}
        pairs = [(a, b) for a in spans for b in spans
                 if a < b and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]]
        if pairs:
            return op, final, pairs[0]
    raise AssertionError("no candidate shares local memory")


def test_buffers_never_live_at_once_share_local_memory(gemm_source):
    """The plan gives the peeled copies' buffers the same bytes; each sharing pair is used in disjoint
    stretches of the program (checked here from the IR, statement by statement), and the program
    computes the right result on the simulator, which checks every read against the last write."""
    op, final, (first, second) = _sharing_candidate(gemm_source)
    top = final.body.stmts
    uses = {name: [i for i, stmt in enumerate(top) if any(
        name in {getattr(getattr(n, "buffer", None), "name", None), *(a.name for _, a in getattr(n, "operands", ()))}
        for n, _ in walk(stmt))] for name in (first, second)}
    assert uses[first] and uses[second]
    assert max(uses[first]) < min(uses[second]) or max(uses[second]) < min(uses[first])
    arrays = gemm_inputs(200, 160, 72)
    expected = gemm_reference(arrays)
    simulate(final, arrays, SUNWAY)
    assert relative_error(arrays["C"], expected) <= 1e-5


def test_buffers_live_at_once_may_not_share_local_memory(gemm_source, monkeypatch):
    """Two buffers live at once given the same bytes: refused before running; and, with that check
    skipped, the functional simulator meets the read of spoiled data."""
    from swauto.backends.sw26010 import simulator

    module = _final(gemm_source)
    tiles = [b for b in module.buffers if b.copy_of is None]
    clash = {tiles[1].name: tiles[0].offset}
    broken = replace(module, buffers=tuple(replace(b, offset=clash.get(b.name, b.offset)) for b in module.buffers))
    with pytest.raises(SimulationError, match="overlap in LDM while both are live"):
        simulate(broken, gemm_inputs(256, 256, 128), SUNWAY)
    monkeypatch.setattr(simulator, "check_local_memory", lambda module, machine: 0)
    with pytest.raises(SimulationError, match="whose local memory .* has written since"):
        simulate(broken, gemm_inputs(256, 256, 128), SUNWAY)


def _box(name: str, start: int) -> Access:
    """Four elements of a one-axis tensor or buffer from `start`."""
    return Access(name, (ex.Const(start),), (4,), (None,))


def test_a_zero_filled_get_from_wholly_outside_the_tensor_writes_its_tile():
    """Two buffers share local memory one after the other; the second is filled by a zero-filled get
    whose box lies wholly outside the tensor (a convolution's top rows in the padding): no byte moves,
    but the CPEs zero the tile, so reading it reads zeros, not the bytes the first buffer left there."""
    module = Module("shared", (Tensor("X", (8,)), Tensor("Y", (8,), is_output=True)),
                    (LocalBuffer("S", (4,), offset=0, spread="flat"), LocalBuffer("T", (4,), offset=0, spread="flat")),
                    Seq((Dma("get", _box("X", 0), _box("S", 0), "s"), DmaWait("s"),
                         Dma("put", _box("Y", 0), _box("S", 0), "y"), DmaWait("y"),
                         Dma("get", _box("X", -8), _box("T", 0), "t", zero_fill=True), DmaWait("t"),
                         Dma("put", _box("Y", 4), _box("T", 0), "y"), DmaWait("y"))))
    arrays = {"X": np.arange(1, 9, dtype=np.float32), "Y": np.full(8, -1, np.float32)}
    simulate(module, arrays, SUNWAY)
    np.testing.assert_array_equal(arrays["Y"], [1, 2, 3, 4, 0, 0, 0, 0])


def test_a_window_get_gathers_overlapping_rows_and_zeroes_what_lies_outside():
    """A box whose axes 1 and 2 both walk the array's axis 1 (index = 2 i + j - 1): NumPy's own
    sliding windows of the zero-padded array, and the mask of the elements inside."""
    array = np.arange(4 * 7, dtype=np.float32).reshape(4, 7)
    values, inside = gather_window(array, (1, -1, 0), (2, 4, 3), (1, 2, 1), (0, 1, 1))
    padded = np.pad(array, ((0, 0), (1, 2)))
    expected = np.lib.stride_tricks.sliding_window_view(padded, 3, axis=1)[1:3, ::2][:, :4]
    assert values.shape == (2, 4, 3) and (values == expected).all()
    assert inside.sum() == 2 * (4 * 3 - 1 - 1)  # the first window's first tap and the last one's last fall outside
