"""The example operators of several statements and primitives (issue 9): every candidate against the
NumPy reference on both targets (loopy's `auto_test_vs_ref`), their errors, and golden IR.

A spread sample of each space runs on the SW26010's functional simulator and, JIT-compiled, on the
host (in forked children with a timeout); `SWAUTO_EXHAUSTIVE=1` runs every candidate on both.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from isolation import run_isolated

import swauto
from conftest import EXAMPLES, assert_golden_stages, relative_error, sample_legal
from swauto.api import load
from swauto.machine import local_memory_machine
from swauto.reference import reference
from swauto.schedule.space import candidates
from swauto.tuner.space import explore

OPERATORS = {
    "fc_bias_relu": {"B": 5, "In": 130, "Out": 300},
    "softmax": {"B": 20, "N": 520},
    "maxpool": {"B": 3, "C": 5, "Ri": 7, "Ci": 9, "K": 3, "stride": 2},
    "avgpool": {"B": 3, "C": 5, "Ri": 7, "Ci": 9, "K": 2, "stride": 1},
    "conv2d_bias_relu": {"B": 3, "Ni": 5, "No": 6, "Ri": 3, "Ci": 4, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
    "conv2d_nchw": {"B": 2, "Ni": 5, "No": 7, "Ri": 6, "Ci": 9, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
    "conv2d_explicit": {"B": 2, "Ni": 3, "No": 5, "Ri": 7, "Ci": 9, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1},
    "conv2d_winograd": {"B": 3, "Ni": 5, "No": 6, "Ri": 3, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
    "conv2d_winograd4": {"B": 3, "Ni": 5, "No": 6, "Ri": 7, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
    "conv2d_depthwise": {"B": 3, "C": 37, "Ri": 7, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1},
    # The convolutions with their activation fused (what a network's FusedConv nodes run).
    "conv2d_relu": {"B": 3, "Ni": 5, "No": 6, "Ri": 5, "Ci": 7, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1},
    "conv2d_relu6": {"B": 2, "Ni": 7, "No": 9, "Ri": 6, "Ci": 5, "Kr": 1, "Kc": 1, "stride": 1, "pad": 0},
    "conv2d_depthwise_relu": {"B": 2, "C": 5, "Ri": 5, "Ci": 4, "stride": 1, "pad": 1},
    "conv2d_winograd_relu": {"B": 2, "Ni": 5, "No": 6, "Ri": 5, "Ci": 4, "pad_r": 1, "pad_c": 0},
    "conv2d_winograd4_relu": {"B": 2, "Ni": 5, "No": 6, "Ri": 6, "Ci": 7, "pad_r": 0, "pad_c": 1},
    "conv2d_depthwise_relu6": {"B": 2, "C": 11, "Ri": 6, "Ci": 5, "stride": 2, "pad": 1},
    "lstm": {"T": 3, "B": 5, "In": 7, "H": 6},
    "lstm_baseline": {"T": 3, "B": 5, "In": 7, "H": 6},
}
SAMPLE = {"sw26010": 3, "host": 4}  # candidates run per operator and target unless SWAUTO_EXHAUSTIVE is set


def _inputs(op, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors if not t.is_local}


def _sample(name: str, target: str, count: int | None = None, layouts=None, params=None) -> list:
    """Up to `count` (`SAMPLE[target]`) legal candidates of example `name` at `params` (its test sizes),
    drawn at random with a fixed seed, as many fused as apart (every legal one with SWAUTO_EXHAUSTIVE).
    They are lowered one by one (`conftest.sample_legal`): the space is never built whole."""
    op = load(EXAMPLES / f"{name}.sw", params or OPERATORS[name], layouts)
    machine = local_memory_machine(target)
    if os.environ.get("SWAUTO_EXHAUSTIVE"):
        return explore(op, machine).candidates
    count = count or SAMPLE[target]
    fused = sample_legal(op, count // 2, 0, (machine,), where=lambda c: c.fused)
    return fused + sample_legal(op, count - len(fused), 0, (machine,), where=lambda c: not c.fused)


def _error(kernel: swauto.Kernel) -> float:
    """The largest relative error of `kernel`'s outputs against the reference, on random inputs."""
    arrays = _inputs(kernel.operator)
    expected = reference(kernel.operator, arrays)
    kernel(**arrays)
    return max(relative_error(arrays[out], value) for out, value in expected.items())


def _run(name: str, params: dict[str, int], target: str, candidate) -> float:
    """The relative error of `candidate`'s result against the reference."""
    return _error(swauto.compile(EXAMPLES / f"{name}.sw", params=params, target=target, schedule=candidate))


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_sw26010_candidates_match_the_reference(name):
    params = OPERATORS[name]
    candidates = _sample(name, "sw26010")
    assert candidates
    errors = {candidate.id: _run(name, params, "sw26010", candidate) for candidate in candidates}
    assert max(errors.values()) < 1e-4, sorted(errors.items(), key=lambda item: -item[1])[:3]


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_host_candidates_match_the_reference(name):
    params = OPERATORS[name]
    candidates = _sample(name, "host")
    outcomes = run_isolated(lambda candidate: _run(name, params, "host", candidate), candidates,
                            labels=[c.id for c in candidates])
    failed = [str(outcome) for outcome in outcomes if not outcome.ok or outcome.value >= 1e-4]
    assert not failed, failed


@pytest.mark.parametrize("name", ["avgpool", "conv2d_bias_relu", "conv2d_winograd", "maxpool"])
def test_host_candidates_of_several_statements_match_the_reference_on_two_threads_in_process(name):
    """The forked children above share iterations on Python's pool (libgomp's team does not survive a
    fork). Here, in this process, on the native pool where it loads: two threads, each statement's nest
    a segment of its own (`parallel.segments`), a spread of candidates against the reference."""
    params = OPERATORS[name]
    shared = 0
    for candidate in _sample(name, "host", 6):
        kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target="host", schedule=candidate, threads=2)
        shared += sum(bool(phases.loops) for phases in kernel.program.plan.segments) > 1
        assert _error(kernel) < 1e-4, candidate.describe()
    assert shared  # some candidate shares more than one nest


CHANNELS_LAST = {  # the window operators' activations, channels innermost (what `swauto.Model` pins)
    "maxpool": ({"input": "Ri Ci B C", "output": "Ro Co B C"}, OPERATORS["maxpool"]),
    "avgpool": ({"input": "Ri Ci B C", "output": "Ro Co B C"}, OPERATORS["avgpool"]),
    "conv2d_depthwise": ({"input": "Ri Ci B C", "output": "Ro Co B C"}, OPERATORS["conv2d_depthwise"]),
    "batchnorm": ({"x": "R C B Ch", "y": "R C B Ch"}, {"B": 3, "Ch": 37, "R": 5, "C": 7}),
    "conv2d": ({"input": "Ri Ci B Ni", "output": "Ro Co B No"},
               {"B": 3, "Ni": 5, "No": 6, "Ri": 7, "Ci": 9, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1}),
}


def _run_pinned(name: str, target: str, candidate) -> float:
    layouts, params = CHANNELS_LAST[name]
    kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target=target, schedule=candidate, layouts=layouts)
    assert set(kernel.layouts[tensor] for tensor in layouts) == {(0, 1, 3, 2)}
    return _error(kernel)


@pytest.mark.parametrize("target", ["host", "sw26010"])
@pytest.mark.parametrize("name", sorted(CHANNELS_LAST))
def test_window_operators_with_channels_innermost_match_the_reference(name, target):
    """The layouts `swauto.Model` pins its activations to, on a spread sample of each pinned space."""
    layouts, params = CHANNELS_LAST[name]
    candidates = _sample(name, target, layouts=layouts, params=params)
    outcomes = run_isolated(lambda candidate: _run_pinned(name, target, candidate), candidates,
                            labels=[c.id for c in candidates])
    failed = [str(outcome) for outcome in outcomes if not outcome.ok or outcome.value >= 1e-4]
    assert candidates and not failed, failed


@pytest.mark.parametrize("stride", [1, 2])
def test_nchw_convolution_at_both_strides_is_pytorchs(stride):
    """The NCHW example computes PyTorch's conv2d (checked against a direct NumPy convolution)."""
    params = {"B": 2, "Ni": 3, "No": 4, "Ri": 7, "Ci": 8, "Kr": 3, "Kc": 3, "stride": stride, "pad": 1}
    kernel = swauto.compile(EXAMPLES / "conv2d_nchw.sw", params=params, target="host")
    arrays = _inputs(kernel.operator)
    x = np.pad(arrays["input"].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    w = arrays["weight"].astype(np.float64)
    ro, co = arrays["output"].shape[2:]
    expected = np.zeros(arrays["output"].shape)
    for kr in range(3):
        for kc in range(3):
            window = x[:, :, kr:kr + stride * ro:stride, kc:kc + stride * co:stride]
            expected += np.einsum("bihw,oi->bohw", window, w[:, :, kr, kc])
    kernel(**arrays)
    assert relative_error(arrays["output"], expected) < 1e-5


def test_outputs_are_overwritten_and_intermediates_are_not_arguments():
    kernel = swauto.compile(EXAMPLES / "softmax.sw", params={"B": 16, "N": 600}, target="host")
    assert kernel.tensors == ("x", "y")
    arrays = _inputs(kernel.operator)
    arrays["y"][...] = 1e6  # whatever y held is overwritten
    kernel(**arrays)
    x = arrays["x"].astype(np.float64)
    expected = np.exp(x - x.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    assert relative_error(arrays["y"], expected) < 1e-5


def _direct_convolution(x: np.ndarray, w: np.ndarray, stride: int, pad_r: int, pad_c: int) -> np.ndarray:
    """output[ro, co, No, B] of input[Ri, Ci, Ni, B] and weight[Kr, Kc, No, Ni], in float64 (`pad_r`
    rows and `pad_c` columns of zeros on each side)."""
    ri, ci = x.shape[:2]
    kr, kc = w.shape[:2]
    x = np.pad(x.astype(np.float64), ((pad_r, pad_r), (pad_c, pad_c), (0, 0), (0, 0)))
    ro, co = (ri + 2 * pad_r - kr) // stride + 1, (ci + 2 * pad_c - kc) // stride + 1
    return sum(np.einsum("rcib,oi->rcob", x[r:r + stride * ro:stride, c:c + stride * co:stride], w[r, c])
               for r in range(kr) for c in range(kc))


@pytest.mark.parametrize(("name", "stride", "pad_r", "pad_c"), [
    ("conv2d_explicit", 1, 0, 0), ("conv2d_explicit", 2, 1, 1), ("conv2d_explicit", 1, 1, 0),
    ("conv2d_winograd", 1, 0, 0), ("conv2d_winograd", 1, 1, 1), ("conv2d_winograd4", 1, 0, 1),
    ("conv2d_winograd_relu", 1, 1, 0), ("conv2d_winograd4_relu", 1, 1, 1)])
def test_explicit_and_winograd_convolutions_are_convolutions(name, stride, pad_r, pad_c):
    """Checked against a direct convolution, not the seed's own semantics: im2col with stride and
    padding folded in, and Winograd's transforms with the crop of odd output sizes. Each adds into the
    output, as examples/conv2d.sw does (what `swauto.choose` takes them for); the _relu forms then
    apply a ReLU."""
    params = {**OPERATORS[name.removesuffix("_relu")], "stride": stride, "pad_r": pad_r, "pad_c": pad_c}
    candidate = next(candidates(load(EXAMPLES / f"{name}.sw", params)))  # tiny: every tile fits
    kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target="sw26010", schedule=candidate)
    arrays = _inputs(kernel.operator)
    start = arrays["output"].copy()
    kernel(**arrays)
    expected = start + _direct_convolution(arrays["input"], arrays["weight"].astype(np.float64), stride, pad_r, pad_c)
    if name.endswith("_relu"):
        expected = np.maximum(expected, 0)
    assert relative_error(arrays["output"], expected) < 1e-5


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_winograd_in_channel_blocks_with_tails_is_a_convolution(target):
    """More than 256 channels each way: the 16 GEMMs run over blocks of No and accumulate over blocks
    of Ni, the last block of each partial (270 = 256 + 14, 300 = 256 + 44)."""
    params = {"B": 1, "Ni": 300, "No": 270, "Ri": 3, "Ci": 3, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(EXAMPLES / "conv2d_winograd.sw", params)
    candidate = next(c for c in candidates(op) if dict(c.splits).get("gemm.N") == dict(c.splits).get("gemm.K") == 256)
    kernel = swauto.compile(EXAMPLES / "conv2d_winograd.sw", params=params, target=target, schedule=candidate)
    arrays = _inputs(kernel.operator)
    start = arrays["output"].copy()
    kernel(**arrays)
    expected = start + _direct_convolution(arrays["input"], arrays["weight"].astype(np.float64), 1, 1, 1)
    assert relative_error(arrays["output"], expected) < 1e-5


@pytest.mark.parametrize("target", ["sw26010", "host"])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_convolution_is_a_grouped_convolution(target, stride):
    """Each channel convolved with its own filter (PyTorch's groups = channels, here channels-last),
    against a direct NumPy convolution; 37 channels in blocks of 32, odd image sizes, the model's pick."""
    params = {**OPERATORS["conv2d_depthwise"], "stride": stride}
    kernel = swauto.compile(EXAMPLES / "conv2d_depthwise.sw", params=params, target=target)
    arrays = _inputs(kernel.operator)
    x = np.pad(arrays["input"].astype(np.float64), ((1, 1), (1, 1), (0, 0), (0, 0)))
    w = arrays["weight"].astype(np.float64)
    ro, co = arrays["output"].shape[:2]
    expected = arrays["output"].astype(np.float64)
    for kr in range(3):
        for kc in range(3):
            expected = expected + x[kr:kr + stride * ro:stride, kc:kc + stride * co:stride] * w[kr, kc, :, None]
    kernel(**arrays)
    assert relative_error(arrays["output"], expected) < 1e-5


@pytest.mark.parametrize("name", ["lstm", "lstm_baseline"])
def test_the_lstm_examples_compute_an_lstm(name):
    """Gates i, f, g, o along 4H; every step's h and the last c, against NumPy's recurrence."""
    kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=OPERATORS[name], target="host")
    a = _inputs(kernel.operator)
    kernel(**a)
    x, h, c, w, r, b = (a[n].astype(np.float64) for n in ("x", "h0", "c0", "W", "R", "bias"))
    size = h.shape[1]
    hidden = []
    for t in range(x.shape[0]):
        gates = x[t] @ w + h @ r + b
        i, f, o = (1 / (1 + np.exp(-gates[:, k * size:(k + 1) * size])) for k in (0, 1, 3))
        c = f * c + i * np.tanh(gates[:, 2 * size:3 * size])
        h = o * np.tanh(c)
        hidden.append(h)
    assert relative_error(a["h"], np.stack(hidden)) < 1e-5 and relative_error(a["c_last"], c) < 1e-5


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_golden_ir_after_every_pass(name):
    op = load(EXAMPLES / f"{name}.sw", OPERATORS[name])
    (candidate,) = sample_legal(op, 1, seed=None)  # the space's first legal candidate
    assert_golden_stages(op, candidate, f"{name}.txt")


WINOGRAD_INPUT_SW = """
operator winograd_input_tiles(T = 5, C = 8) {
  tensor d[T, 4, 4, C]
  tensor t[T, 4, 4, C] local
  tensor v[T, 4, 4, C]
  compute {
    for i in 0..T { for c in 0..4 {
      rows: winograd_input(I = 4, J = 4, N = C, X = d[i, :J, c, :N], Z = t[i, :I, c, :N])
    } }
    for i2 in 0..T { for r in 0..4 {
      columns: winograd_input(I = 4, J = 4, N = C, X = t[i2, r, :J, :N], Z = v[i2, r, :I, :N])
    } }
  }
  schedule {
    split c by {1, 2, 4}
    fuse c.inner into rows.N
    split r by {1, 4}
    fuse r.inner into columns.N
    reorder any
  }
}
"""


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_a_constant_matrix_transform_on_both_axes_of_a_tile_is_winograds(target):
    """Bᵀ d B of every 4 x 4 tile (Winograd's input transform) by two transform statements, every
    candidate against NumPy."""
    params = {"T": 3, "C": 5}
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
    candidates = swauto.schedules(WINOGRAD_INPUT_SW, params=params, target=target)
    assert len(candidates) >= 12
    for candidate in candidates[:: 1 if target == "sw26010" else 4]:
        kernel = swauto.compile(WINOGRAD_INPUT_SW, params=params, target=target, schedule=candidate)
        arrays = _inputs(kernel.operator)
        expected = np.einsum("ij,tjkc,lk->tilc", bt, arrays["d"].astype(np.float64), bt)
        kernel(**arrays)
        assert relative_error(arrays["v"], expected) < 1e-6, candidate


def test_an_overwritten_output_no_loop_reduces_into_is_neither_filled_nor_read():
    """A 1 x 1 convolution that overwrites its output, on one channel block: nothing reduces around
    its GEMM, so each tile starts from zero in local memory (`init_outputs`): no fill nest, no get of
    the output."""
    from swauto.ir.nodes import Call, Dma
    from swauto.ir.visitor import walk

    params = {"B": 2, "Ni": 7, "No": 9, "Ri": 6, "Ci": 5, "Kr": 1, "Kc": 1, "stride": 1, "pad": 0}
    kernel = swauto.compile(EXAMPLES / "conv2d_nchw.sw", params=params, target="sw26010")
    nodes = [node for node, _ in walk(kernel.module.body)]
    assert not [n for n in nodes if isinstance(n, Call) and n.primitive == "fill"]
    assert not [n for n in nodes if isinstance(n, Dma) and n.direction == "get" and n.tensor.name == "output"]
    assert _error(kernel) < 1e-5


@pytest.mark.parametrize("target", ["host", "sw26010"])
def test_an_overwritten_output_reduced_inside_its_tiles_is_zeroed_there_not_filled(target: str):
    """A 3 x 3 convolution that overwrites its output (conv2d_bias_relu.sw): where the kernel-tap loops
    run inside the loops that move the output tile, each tile is completed inside one iteration of
    them, so `init_outputs` keeps the GEMM overwriting and `infer_dma` zeroes the tile before the taps
    (no fill nest, no get of the output, the flag cleared); where a tap loop runs outside one that
    moves the tile, the output is filled first. Both compute the reference's result."""
    from swauto.ir.nodes import Call, Dma
    from swauto.ir.visitor import walk

    params = OPERATORS["conv2d_bias_relu"]
    moving = ("cRo_outer", "cCo_outer")

    def taps_inside(candidate) -> bool:
        splits = dict(candidate.splits)  # a tap loop fused whole into K runs once: it reduces nothing
        reducing = [v for v in candidate.order if v.startswith(("cKr", "cKc")) and splits.get(v[:3], 1) < params["Kr"]]
        return max(candidate.order.index(v) for v in moving) < min(
            (candidate.order.index(v) for v in reducing), default=len(candidate.order))

    op, machine = load(EXAMPLES / "conv2d_bias_relu.sw", params), local_memory_machine(target)
    for inside in (True, False):
        chosen = sample_legal(op, 1, 0, (machine,), where=lambda c, inside=inside: taps_inside(c) == inside)
        assert chosen, f"the space lacks candidates with the taps {'inside' if inside else 'outside'}"
        candidate, = chosen
        kernel = swauto.compile(EXAMPLES / "conv2d_bias_relu.sw", params=params, target=target, schedule=candidate)
        nodes = [node for node, _ in walk(kernel.module.body)]
        fills = [n for n in nodes if isinstance(n, Call) and n.primitive == "fill"]
        output_gets = [n for n in nodes if isinstance(n, Dma) and n.direction == "get" and n.tensor.name == "output"
                       and any(isinstance(c, Call) and c.primitive == "gemm" and c.output.name == n.buffer.name
                               for c in nodes)]
        assert (not fills and not output_gets) if inside else fills, candidate.describe()
        # The flag is cleared; on the host `fold_zeros` sets it again on a GEMM that fills a tile just zeroed.
        overwriting = [n for n in nodes if isinstance(n, Call) and n.overwrite]
        assert not overwriting or target == "host" and all(n.primitive == "gemm" for n in overwriting)
        assert _error(kernel) < 1e-5, candidate.describe()


@pytest.mark.parametrize("target", ["host", "sw26010"])
def test_a_last_tile_shorter_than_the_others_is_still_complete_in_its_iteration(target: str):
    """Output columns in tiles of 4 over 7 (a last tile of 3: its extent is `min(4, 7 - 4 * i)` until
    `peel_boundaries`): the tiles are still disjoint, each completed inside one iteration of the loops
    that move it, so the overwriting convolution zeroes its tiles and never fills or reads its output
    (a first layer's last tile was filled, then read back: Inception-v3's stem ran at 6% of a core
    group for it, 17% without)."""
    from swauto.ir.nodes import Call, Dma
    from swauto.ir.visitor import walk

    params = {"B": 1, "Ni": 3, "No": 8, "Ri": 7, "Ci": 7, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(EXAMPLES / "conv2d_bias_relu.sw", params)
    # The kernel's taps all in K (no loop reduces into a tile), bias and ReLU on the tiles.
    candidate = next(c for c in candidates(op) if len(c.fused) == 2
                     and dict(c.splits) | {"cCo": 4, "cKr": 3, "cKc": 3} == dict(c.splits))
    kernel = swauto.compile(EXAMPLES / "conv2d_bias_relu.sw", params=params, target=target, schedule=candidate)
    nodes = [node for node, _ in walk(kernel.module.body)]
    assert not [n for n in nodes if isinstance(n, Call) and n.primitive == "fill"]
    assert not [n for n in nodes if isinstance(n, Dma) and n.direction == "get" and n.tensor.name == "output"]
    assert _error(kernel) < 1e-5


@pytest.mark.parametrize("target", ["host", "sw26010"])
def test_an_output_axis_split_in_two_loops_is_still_zeroed_in_its_tiles(target: str):
    """A depthwise convolution that overwrites its output, its output rows in tiles of 4 over 10 (the
    rows' start `r_inner + 4 * r_outer`, stepped by two loops, a last tile of 2), its taps innermost:
    the two loops step the rows in mixed radix, so distinct iterations still write disjoint tiles, and
    `init_outputs` zeroes each tile in local memory rather than filling the output first and reading it
    back, two passes more over the output (MobileNetV2 block3.1.depthwise at B = 8, one thread: its pick
    ran 1.26 - 1.47x as fast as the pick of before, in three runs in turns).
    Steps that overlap are refused: a scatter's boxes, or a loop stepping the rows by less than the span
    of another's."""
    from dataclasses import replace

    from swauto.ir import expr as ex
    from swauto.ir.nodes import Call, Dma, For
    from swauto.ir.visitor import walk
    from swauto.passes.init_outputs import moving_loops

    source = (EXAMPLES / "conv2d_depthwise.sw").read_text().replace("Z += output[", "Z = output[")
    source = source.replace("split r by {8, 16, Ro}", "split r by {4}")
    params = {"B": 2, "C": 5, "Ri": 10, "Ci": 6, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(source, params)
    candidate = next(c for c in candidates(op)
                     if {"r_outer", "r_inner"} <= set(c.order) and c.order[-2:] == ("kr", "kc"))
    kernel = swauto.compile(source, params=params, target=target, schedule=candidate)
    nodes = [node for node, _ in walk(kernel.module.body)]
    assert not [n for n in nodes if isinstance(n, Call) and n.primitive == "fill"], candidate.describe()
    assert not [n for n in nodes if isinstance(n, Dma) and n.direction == "get" and n.tensor.name == "output"]
    assert _error(kernel) < 1e-5, candidate.describe()

    macc = next(n for n in walk(op.seed.body) if isinstance(n[0], Call))[0]

    def rows_at(start: ex.Expr, extent: int = 1) -> Call:
        rows = replace(macc.output, starts=(start, *macc.output.starts[1:]), extents=(extent, *macc.output.extents[1:]))
        return replace(macc, operands=tuple((role, rows if role == "Z" else access) for role, access in macc.operands))

    outer, inner = For("r_outer", ex.Const(0), ex.Const(3), 1, None), For("r_inner", ex.Const(0), ex.Const(4), 1, None)
    r_outer, r_inner = ex.Var("r_outer"), ex.Var("r_inner")
    assert moving_loops([outer, inner], rows_at(r_outer * 4 + r_inner)) == {"r_outer", "r_inner"}
    assert moving_loops([outer, inner], rows_at(r_outer * 3 + r_inner)) is None  # the 4th row meets the next
    assert moving_loops([outer, inner], rows_at(r_outer * 8 + r_inner * 2, 2)) == {"r_outer", "r_inner"}
    assert moving_loops([outer, inner], rows_at(r_outer * 8 + r_inner * 2, 3)) is None  # boxes of 3 rows, 2 apart


@pytest.mark.parametrize("target", ["host", "sw26010"])
def test_a_first_layer_with_bias_and_relu6_joins_sixteen_rows_and_matches_the_reference(target: str):
    """conv2d_bias_relu6.sw (MobileNetV2's first layer: 3 channels, stride 2, as a network runs it): a
    tile of 16 output rows in M with the kernel's taps in K (the first-layer tile; of 20 rows, so a last
    tile of 4) computes the reference's result (the model's picks run in test_models.py's MobileNetV2)."""
    params = {"B": 1, "Ni": 3, "No": 5, "Ri": 40, "Ci": 9, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1}
    op = load(EXAMPLES / "conv2d_bias_relu6.sw", params)
    candidate = next(c for c in candidates(op) if {"cRo": 16, "cKr": 3, "cKc": 3}.items() <= dict(c.splits).items())
    kernel = swauto.compile(EXAMPLES / "conv2d_bias_relu6.sw", params=params, target=target, schedule=candidate)
    assert _error(kernel) < 1e-5


FUSED_BIAS = """
operator gemm_bias(M = 64, N = 96, K = 32) {
  tensor A[M, K]
  tensor W[K, N]
  tensor b[N]
  tensor C[M, N]
  compute {
    gemm(M = M, N = N, K = K, A = A, B = W, C = C)
    bias: add(M = M, N = N, X = C, Y = b, Z = C)
  }
  schedule {
    split gemm.M by {32}
    layout C any of {[M, N], [N, M]}
    fuse bias into gemm
  }
}
"""


@pytest.mark.parametrize("target", ["host", "sw26010"])
def test_a_fused_input_follows_its_axis_in_a_permuted_output(target):
    """A bias fused into a GEMM whose output is kept transposed: the bias's box follows the output's
    N axis where it sits in memory (it followed M, the axis at N's declared place, before)."""
    pinned = swauto.schedules(FUSED_BIAS, target=target, layouts={"C": ["N", "M"]})
    fused = [candidate for candidate in pinned if candidate.fused]
    assert fused

    outcomes = run_isolated(lambda candidate: _error(swauto.compile(FUSED_BIAS, target=target, schedule=candidate)),
                            fused, labels=[c.id for c in fused])
    assert all(outcome.ok and outcome.value < 1e-5 for outcome in outcomes), [str(o) for o in outcomes]
