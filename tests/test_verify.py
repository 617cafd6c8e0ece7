"""The IR verifier, the dependence proofs behind double buffering and hoisting, and the simulators'
refusal of programs the machine would not run right."""

from __future__ import annotations

import operator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import swauto.passes.double_buffer as double_buffer_pass
import swauto.passes.hoist_dma as hoist_dma_pass
from conftest import SCATTER_SW
from swauto.api import load
from swauto.backends.sw26010 import simulate, time_module
from swauto.errors import SimulationError
from swauto.ir import expr as ex
from swauto.ir.dependence import disjoint, disjoint_anywhere
from swauto.ir.nodes import (
    Access,
    Alloc,
    Call,
    Compare,
    Dma,
    DmaWait,
    For,
    If,
    LocalBuffer,
    Module,
    Seq,
    Tensor,
    Zero,
    gemm_call,
)
from swauto.ir.verify import VerificationError, _refine, verify, verify_functions
from swauto.machine import SUNWAY
from swauto.pipeline import lower
from swauto.reference import reference
from swauto.tuner.space import explore

i = ex.Var("i")

# The scatter with the image-size-aware splits only, at small sizes.
SCATTER = SCATTER_SW.replace("split cCo by {2, 4}\n    split cRo by {2}", "split cCo by {1, 2, 3}")
SCATTER_SIZES = {"B": 2, "Ni": 4, "No": 4, "Ro": 3, "Co": 4, "Kr": 2, "Kc": 3}


def _box(name: str, starts, extents, dims=None) -> Access:
    return Access(name, tuple(ex.as_expr(s) for s in starts), tuple(extents), dims or (None,) * len(extents))


def _program(body, rows: int = 8) -> Module:
    """X[4 * rows, 16] -> tiles of `rows` rows (T, two halves) -> Y."""
    tensors = (Tensor("X", (4 * rows, 16)), Tensor("Y", (4 * rows, 16), is_output=True))
    return Module("p", tensors, (LocalBuffer("T", (2, rows, 16)),), body)


def _get(row: ex.Expr | int, half: ex.Expr | int = 0, rows: int = 8, tensor: str = "X", reply: str = "r") -> Dma:
    return Dma("get", _box(tensor, (ex.as_expr(row) * rows, 0), (rows, 16)), _box("T", (half, 0, 0), (1, rows, 16)),
               reply)


def _put(row: ex.Expr | int, half: ex.Expr | int = 0, rows: int = 8, reply: str = "w") -> Dma:
    return Dma("put", _box("Y", (ex.as_expr(row) * rows, 0), (rows, 16)), _box("T", (half, 0, 0), (1, rows, 16)),
               reply)


def _use(half: ex.Expr | int = 0, rows: int = 8) -> Call:
    tile = _box("T", (half, 0, 0), (1, rows, 16), (None, "M", "N"))
    return gemm_call(rows, 16, 16, _box("T", (half, 0, 0), (1, rows, 16), (None, "M", "K")), tile, tile, "N")


def test_a_correct_single_buffered_loop_verifies():
    verify(_program(For("i", ex.Const(0), ex.Const(4), 1, Seq((_get(i), DmaWait("r"), _use(), _put(i),
                                                                  DmaWait("w"))))))


def test_a_double_buffered_loop_verifies_by_the_halves_parity_and_the_prefetch_condition():
    body = Seq((DmaWait("r"), DmaWait("w"), If(Compare("<", i + 1, ex.Const(4)), _get(i + 1, (i + 1) % 2)),
                _use(i % 2), _put(i, i % 2)))
    verify(_program(Seq((_get(0, 0), For("i", ex.Const(0), ex.Const(4), 1, body), DmaWait("w")))))


@pytest.mark.parametrize(("body", "problem"), [
    (Seq((_get(0), _use())), "while a transfer of it is in flight"),
    (Seq((_get(0), DmaWait("r"))), None),
    (Seq((_get(0),)), "never waited for"),
    (Seq((_use(),)), "where no statement has written it"),
    (For("i", ex.Const(0), ex.Const(5), 1, Seq((_get(i), DmaWait("r")))), "may leave X along axis 0"),
    # Without the condition, the prefetch of the last iteration would leave X.
    (For("i", ex.Const(0), ex.Const(4), 1, Seq((_get(i + 1, 1), DmaWait("r")))), "may leave X"),
    (Seq((Zero(_box("T", (0, 0, 0), (1, 8, 16))), _put(0), _get(0, 1, tensor="Y"), DmaWait("r"), DmaWait("w"))),
     "that a put still in flight"),
    (Seq((Zero(_box("T", (0, 0, 0), (1, 8, 16))), _put(0), _get(1, 1, tensor="Y"), DmaWait("r"), DmaWait("w"))),
     None),
    (Seq((_get(0), DmaWait("r"), _put(0), _use(), DmaWait("w"))), "while a transfer of it is in flight"),
])
def test_the_verifier_refuses_what_breaks_an_invariant(body, problem):
    module = _program(body)
    if problem is None:
        verify(module)
    else:
        with pytest.raises(VerificationError, match=problem):
            verify(module)


def test_only_a_buffer_spread_over_the_mesh_is_exchanged():
    body = Seq((replace(_get(0), exchanged=True), DmaWait("r")))
    verify(_program(body))
    flat = _program(body)
    flat = replace(flat, buffers=(replace(flat.buffers[0], spread="flat"),))
    with pytest.raises(VerificationError, match="is exchanged, but its buffer is not spread over the mesh"):
        verify(flat)


def test_a_stage_that_only_adds_allocations_is_checked_for_those_alone():
    """`verified`: the stage before, which passed. Allocations added at the top of its very statements
    are checked (they name local buffers); a stage with other statements is walked whole."""
    loop = For("i", ex.Const(0), ex.Const(4), 1, Seq((_get(i), DmaWait("r"), _use(), _put(i), DmaWait("w"))))
    before = _program(Seq((Alloc("T"), loop)))
    verify(before)
    twin = LocalBuffer("T_double", (8, 16), "float64", copy_of="T")
    verify(replace(before, buffers=(*before.buffers, twin), body=Seq((Alloc("T"), Alloc("T_double"), loop))),
           verified=before)
    with pytest.raises(VerificationError, match="allocates U, which is not a local buffer"):
        verify(replace(before, body=Seq((Alloc("T"), Alloc("U"), loop))), verified=before)
    broken = For("i", ex.Const(0), ex.Const(4), 1, Seq((_get(i), _use(), DmaWait("r"), _put(i), DmaWait("w"))))
    with pytest.raises(VerificationError, match="while a transfer of it is in flight"):
        verify(replace(before, body=Seq((Alloc("T"), broken))), verified=before)


def _stored(half: ex.Expr, row: ex.Expr, wait_first: bool = True) -> list:
    """A stored result double buffered: half `half` zeroed and computed, the previous write-back waited
    for, then this one issued."""
    tile = _box("T", (half, 0, 0), (1, 8, 16))
    put = Dma("put", _box("Y", (row * 8, 0), (8, 16)), tile, "w")
    return [Zero(tile), _use(half), *([DmaWait("w")] if wait_first else []), put]


def test_a_stored_result_double_buffered_verifies_by_the_iteration_just_before():
    """The write-back of iteration i - 1 (half (i - 1) % 2) is still in flight while iteration i writes
    half i % 2: the verifier compares it at that iteration's values, over a chain of loops too (the
    halves alternate with the linear index). Without the wait before each put, two are in flight and
    the one of iteration i - 2 meets the half being written; with halves alternating over the inner
    loop alone, three iterations put the first of the next row's tiles in the half still in flight."""
    verify(_program(Seq((For("i", ex.Const(0), ex.Const(4), 1, Seq(tuple(_stored(i % 2, i)))), DmaWait("w")))))
    with pytest.raises(VerificationError, match="while a transfer of it is in flight"):
        verify(_program(Seq((For("i", ex.Const(0), ex.Const(4), 1, Seq(tuple(_stored(i % 2, i, False)))),
                             DmaWait("w")))))
    j = ex.Var("j")
    tensors = (Tensor("X", (48, 16)), Tensor("Y", (48, 16), is_output=True))

    def chain(half: ex.Expr) -> Module:
        inner = For("i", ex.Const(0), ex.Const(3), 1, Seq(tuple(_stored(half, j * 3 + i))))
        return Module("p", tensors, (LocalBuffer("T", (2, 8, 16)),),
                      Seq((For("j", ex.Const(0), ex.Const(2), 1, inner), DmaWait("w"))))

    verify(chain((j * 3 + i) % 2))
    with pytest.raises(VerificationError, match="while a transfer of it is in flight"):
        verify(chain(i % 2))


def test_host_phases_must_define_what_they_read():
    """A function that reads a buffer filled only by another thread's function is refused."""
    fill, use = Seq((_get(0), DmaWait("r"))), Seq((_use(), _put(0), DmaWait("w")))
    module = _program(Seq((fill, use)))
    verify(module)
    verify_functions(module, [[fill, use]])
    with pytest.raises(VerificationError, match="where no statement has written it"):
        verify_functions(module, [[fill, use], [use]])


def _scatter_stages(monkeypatch, broken: bool):
    """Every double-buffered lowering of the scatter-form backward-data seed, optionally with the
    double-buffering proofs replaced by 'always disjoint' (the bug the issue reported)."""
    if broken:
        monkeypatch.setattr(double_buffer_pass, "_next_tile_disjoint", lambda chain, box: True)
        monkeypatch.setattr(double_buffer_pass, "_others_disjoint", lambda get, chain: True)
    monkeypatch.setenv("SWAUTO_VERIFY", "0")
    op = load(SCATTER, SCATTER_SIZES)
    return op, [stages for candidate, stages in explore(op, SUNWAY).legal if candidate.double_buffer]


def test_without_the_proof_double_buffering_breaks_the_scatter_and_every_check_sees_it(monkeypatch):
    """With the proof disabled, both simulators refuse the candidates whose transfers really collide,
    and the verifier refuses every one of those (it may refuse more: it proves, for every iteration,
    what the simulators see for the iterations that run); no candidate computes a wrong result."""
    op, lowered = _scatter_stages(monkeypatch, broken=True)
    rng = np.random.default_rng(0)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, arrays)["dXp"]
    refused = collided = wrong = 0
    for stages in lowered:
        module = stages[-1][1]
        try:
            verify(module)
            proven = True
        except VerificationError:
            refused += 1
            proven = False
        result = {n: a.copy() for n, a in arrays.items()}
        try:
            simulate(module, result, SUNWAY)
        except SimulationError:
            collided += 1
            assert not proven, "the functional simulator refused a candidate the verifier accepts"
            with pytest.raises(SimulationError):
                time_module(module, SUNWAY)
            continue
        wrong += np.abs(result["dXp"] - expected).max() > 1e-4 * np.abs(expected).max()
    assert refused >= collided > 0 and wrong == 0


def test_with_the_proof_every_double_buffered_scatter_candidate_verifies_and_is_right(monkeypatch):
    op, lowered = _scatter_stages(monkeypatch, broken=False)
    rng = np.random.default_rng(1)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, arrays)["dXp"]
    assert lowered
    for index, stages in enumerate(lowered):
        for name, module in stages:
            verify(module, name)
        if index % 3:
            continue  # tests/test_legality.py runs every candidate; here a third suffices
        result = {n: a.copy() for n, a in arrays.items()}
        simulate(stages[-1][1], result, SUNWAY)
        assert np.abs(result["dXp"] - expected).max() <= 1e-4 * np.abs(expected).max()


PEELED_SCATTER = SCATTER_SW.replace("split cCo by {2, 4}", "split cCo by {4}")


@pytest.mark.parametrize("proof", [True, False])
def test_an_output_tile_is_hoisted_only_where_no_other_call_writes_into_it(monkeypatch, proof):
    """Peeled copies of the scatter write overlapping boxes. Hoisting one copy's tile over a loop that
    also runs the other copy would let its put undo the other's results: without the proof the
    functional simulator refuses such candidates; with it every candidate is right."""
    if not proof:
        monkeypatch.setattr(hoist_dma_pass, "_window_is_private", lambda role, level, boxes: True)
    monkeypatch.setenv("SWAUTO_VERIFY", "0")
    op = load(PEELED_SCATTER, {**SCATTER_SIZES, "Co": 6})
    rng = np.random.default_rng(2)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, arrays)["dXp"]
    refused = 0
    for candidate, stages in explore(op, SUNWAY).legal:
        if candidate.double_buffer:
            continue  # the same tiles and hoisting as the single-buffered twin
        result = {n: a.copy() for n, a in arrays.items()}
        try:
            simulate(stages[-1][1], result, SUNWAY)
        except SimulationError as error:
            assert "overwrites what another put wrote" in str(error)
            refused += 1
            continue
        assert np.abs(result["dXp"] - expected).max() <= 1e-4 * np.abs(expected).max()
    assert (refused == 0) == proof


def test_the_functional_simulator_refuses_a_put_that_overwrites_another_puts_result():
    """Two tiles of the same box of Y, read, then written back one after the other: the second put
    would undo the first one's result (the verifier does not follow such windows; the simulator does)."""
    module = Module("lost", (Tensor("Y", (8, 16), is_output=True),),
                    (LocalBuffer("T", (2, 8, 16)),),
                    Seq((Dma("get", _box("Y", (0, 0), (8, 16)), _box("T", (0, 0, 0), (1, 8, 16)), "a"), DmaWait("a"),
                         Dma("get", _box("Y", (0, 0), (8, 16)), _box("T", (1, 0, 0), (1, 8, 16)), "b"), DmaWait("b"),
                         Dma("put", _box("Y", (0, 0), (8, 16)), _box("T", (1, 0, 0), (1, 8, 16)), "c"), DmaWait("c"),
                         Dma("put", _box("Y", (0, 0), (8, 16)), _box("T", (0, 0, 0), (1, 8, 16)), "d"),
                         DmaWait("d"))))
    with pytest.raises(SimulationError, match="overwrites what another put wrote"):
        simulate(module, {"Y": np.zeros((8, 16), np.float32)}, SUNWAY)


@pytest.mark.parametrize("module", [
    _program(For("i", ex.Const(0), ex.Const(5), 1, Seq((_get(i), DmaWait("r"))))),  # out of bounds
    _program(Seq((_get(0),))),  # never waited for
    Module("big", (Tensor("X", (8, 16)),), (LocalBuffer("T", (2048, 512)),),
           Seq((Dma("get", _box("X", (0, 0), (8, 16)), _box("T", (0, 0), (8, 16)), "r"), DmaWait("r")))),
])
def test_the_timed_simulator_refuses_what_the_functional_one_refuses(module):
    arrays = {t.name: np.zeros(t.shape, np.float32) for t in module.tensors}
    with pytest.raises(SimulationError):
        simulate(module, arrays, SUNWAY)
    with pytest.raises(SimulationError):
        time_module(module, SUNWAY)


def test_equal_non_affine_terms_cancel():
    x = ex.Var("x")
    assert ex.bounds(x // 3 + i - x // 3, {"x": (0, 8), "i": (0, 2)}) == (0, 2)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(-6, 6), st.integers(1, 4),
                          st.integers(-6, 6), st.integers(1, 4)), min_size=1, max_size=2),
       st.integers(0, 3), st.integers(0, 3), st.booleans())
def test_disjoint_is_sound(axes, i_high, j_high, independent):
    """Whenever the proof says two boxes are disjoint, no values in the ranges make them meet."""
    j = ex.Var("j")
    starts_a = [ex.simplify(i * a + j * b + c) for a, b, c, _, _, _ in axes]
    starts_b = [ex.simplify(i * b + j * a + d) for a, b, _, _, d, _ in axes]
    extents_a = [e for *_, e, _, _ in axes]
    extents_b = [f for *_, f in axes]
    ranges = {"i": (0, i_high), "j": (0, j_high)}
    values = [(vi, vj) for vi in range(i_high + 1) for vj in range(j_high + 1)]
    pairs = [(p, q) for p in values for q in values] if independent else [(p, p) for p in values]
    if independent:
        proven = disjoint_anywhere(starts_a, extents_a, ranges, starts_b, extents_b, ranges)
    else:
        proven = disjoint(starts_a, extents_a, starts_b, extents_b, ranges)
    if proven:
        for (ai, aj), (bi, bj) in pairs:
            meet = all(
                ex.evaluate(sa, {"i": ai, "j": aj}) < ex.evaluate(sb, {"i": bi, "j": bj}) + eb
                and ex.evaluate(sb, {"i": bi, "j": bj}) < ex.evaluate(sa, {"i": ai, "j": aj}) + ea
                for sa, ea, sb, eb in zip(starts_a, extents_a, starts_b, extents_b, strict=True))
            assert not meet


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), st.integers(-3, 3), st.integers(-8, 8),
       st.integers(-5, 5), st.integers(0, 10))
def test_conditions_narrow_a_range_to_exactly_the_values_that_satisfy_them(op, c, k, low, span):
    v = ex.Var("v")
    ranges = {"v": (low, low + span)}
    narrowed = _refine(Compare(op, v * c + k, ex.Const(1)), ranges)
    test = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
            "!=": operator.ne}[op]
    values = [x for x in range(low, low + span + 1) if test(c * x + k, 1)]
    if not values:
        assert narrowed is None
    else:
        assert narrowed["v"][0] <= min(values) and narrowed["v"][1] >= max(values)
        if op != "!=":
            assert narrowed["v"] == (min(values), max(values))


def test_the_pipeline_verifies_every_stage_when_asked(monkeypatch):
    """With SWAUTO_VERIFY=1 a pass that breaks an invariant stops the pipeline with its stage named."""
    monkeypatch.setattr(double_buffer_pass, "_next_tile_disjoint", lambda chain, box: True)
    monkeypatch.setattr(double_buffer_pass, "_others_disjoint", lambda get, chain: True)
    monkeypatch.setenv("SWAUTO_VERIFY", "1")
    op = load(SCATTER, SCATTER_SIZES)
    monkeypatch.setenv("SWAUTO_VERIFY", "0")
    candidates = [c for c, _ in explore(op, SUNWAY).legal if c.double_buffer]
    monkeypatch.setenv("SWAUTO_VERIFY", "1")
    failures = []
    for candidate in candidates:
        try:
            lower(op, candidate, SUNWAY)
        except VerificationError as error:
            failures.append(str(error))
    assert failures and all("after double_buffer" in failure for failure in failures)


BIASED = """
operator biased(M = 32, N = 256, K = 16) {
  tensor a[M, K]
  tensor w[K, N]
  tensor bias[N]
  tensor y[M, N]
  compute {
    gemm(M = M, N = N, K = K, A = a, B = w, C = y)
    add(M = M, N = N, X = y, Y = bias, Z = y)
  }
  schedule {
    split gemm.N by {128}
    fuse add into gemm
  }
}
"""


def test_double_buffering_leaves_an_output_tile_zeroed_in_local_memory_in_its_iteration(monkeypatch):
    # Each tile of y is computed whole: it is zeroed in local memory, not read, just before the get
    # of the fused add's bias. Only the bias is prefetched; the zeroing is not a transfer.
    monkeypatch.setenv("SWAUTO_VERIFY", "1")
    op = load(BIASED, {})
    doubled = [c for c, _ in explore(op, SUNWAY).legal if c.double_buffer]
    assert doubled
    rng = np.random.default_rng(2)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, arrays)["y"]
    for candidate in doubled:
        final = lower(op, candidate, SUNWAY)[-1][1]
        result = {n: a.copy() for n, a in arrays.items()}
        simulate(final, result, SUNWAY)
        assert np.abs(result["y"] - expected).max() <= 1e-4 * np.abs(expected).max()


def test_a_stored_result_is_double_buffered_its_write_back_overlapping_the_next_tile(monkeypatch):
    """A 1 x 1 convolution that overwrites its output (each tile zeroed in local memory, computed, put):
    double buffered, the output tile gets two halves and each put is waited for only before the next
    one, so the write-backs overlap the next tiles' work. Every such candidate verifies and computes
    the reference's result."""
    import swauto
    from conftest import EXAMPLES
    from swauto.ir.visitor import walk

    monkeypatch.setenv("SWAUTO_VERIFY", "1")
    source = (EXAMPLES / "conv2d.sw").read_text().replace("C += output[cRo, cCo]", "C = output[cRo, cCo]")
    params = {"B": 1, "Ni": 16, "No": 8, "Ri": 14, "Ci": 14, "Kr": 1, "Kc": 1, "stride": 2, "pad": 0}
    op = load(source, params)
    rng = np.random.default_rng(4)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, arrays)["output"]
    overlapped = 0
    for candidate, stages in explore(op, SUNWAY).legal:
        final = stages[-1][1]
        stmts = [node for node, _ in walk(final.body)]
        puts = [k for k, node in enumerate(stmts) if isinstance(node, Dma) and node.tensor.name == "output"]
        if not candidate.double_buffer or not puts or stmts[puts[0] + 1] == DmaWait(stmts[puts[0]].reply):
            continue
        overlapped += 1
        assert final.buffer(stmts[puts[0]].buffer.name).shape[0] == 2
        result = {n: a.copy() for n, a in arrays.items()}
        swauto.compile(source, params, target="sw26010", schedule=candidate)(**result)
        assert np.abs(result["output"] - expected).max() <= 1e-4 * np.abs(expected).max()
    assert overlapped
