"""The implicit-GEMM convolution of examples/conv2d.sw: every candidate equals a NumPy convolution.

As loopy tests its transformations: each scheduled variant is compared with a reference computed
without any schedule, over small random shapes that exercise the boundaries (extents no tile
divides), stride 2, pad 0/1/2, 1x1/3x3/5x5 kernels and B = 1.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

import swauto
from conftest import EXAMPLES, assert_golden_stages, relative_error, sample_legal
from swauto.api import load
from swauto.backends.host.target import machine as host_machine
from swauto.backends.sw26010 import simulate
from swauto.errors import Rejected
from swauto.ir.nodes import Call, Dma
from swauto.ir.printer import format_module
from swauto.ir.visitor import walk
from swauto.machine import SUNWAY
from swauto.passes.plan_local_memory import live_ranges, per_cpe_bytes
from swauto.pipeline import lower
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import candidates
from swauto.tuner.space import explore

CONV_SW = EXAMPLES / "conv2d.sw"
GOLDEN = Path(__file__).parent / "golden"

# (B, Ni, No, Ri, Ci, kernel, stride, pad)
SHAPES = [
    (2, 8, 8, 5, 6, 3, 1, 1),
    (1, 3, 8, 6, 7, 5, 1, 2),
    (3, 5, 7, 6, 6, 1, 1, 0),
    (2, 8, 8, 9, 9, 3, 2, 1),
    (1, 16, 8, 7, 9, 3, 2, 0),
    (5, 8, 8, 5, 6, 3, 1, 1),  # M = S x 5 is padded along the batch axis, not the columns'
]


def params_of(shape) -> dict[str, int]:
    b, ni, no, ri, ci, k, stride, pad = shape
    return {"B": b, "Ni": ni, "No": no, "Ri": ri, "Ci": ci, "Kr": k, "Kc": k, "stride": stride, "pad": pad}


def convolution(inputs: np.ndarray, weight: np.ndarray, stride: int, pad: int, pad_c: int | None = None) -> np.ndarray:
    """output[ro, co, no, b] = sum weight[kr, kc, no, ni] input[ro*s+kr-pad, co*s+kc-pad_c, ni, b], in float64
    (`pad_c`: `pad` unless given)."""
    pad_c = pad if pad_c is None else pad_c
    ri, ci, _, _ = inputs.shape
    kr_, kc_, _, _ = weight.shape
    padded = np.pad(inputs.astype(np.float64), ((pad, pad), (pad_c, pad_c), (0, 0), (0, 0)))
    ro, co = (ri + 2 * pad - kr_) // stride + 1, (ci + 2 * pad_c - kc_) // stride + 1
    out = np.zeros((ro, co, weight.shape[2], inputs.shape[3]))
    for kr in range(kr_):
        for kc in range(kc_):
            window = padded[kr : kr + stride * ro : stride, kc : kc + stride * co : stride]
            out += np.einsum("on,rcnb->rcob", weight[kr, kc].astype(np.float64), window)
    return out


def problem(shape, seed=0):
    params = params_of(shape)
    op = load(CONV_SW, params)
    rng = np.random.default_rng(seed)
    arrays = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in op.seed.tensors}
    expected = arrays["output"] + convolution(arrays["input"], arrays["weight"], params["stride"], params["pad"])
    return op, arrays, expected


def run_arranged_on_simulator(module, arrays):
    """Simulate `module` on copies of `arrays` arranged in its layouts; the output in declared layout."""
    arranged = {}
    for tensor in module.tensors:
        array = arrays[tensor.name]
        arranged[tensor.name] = np.array(array.transpose(tensor.layout) if tensor.layout else array, copy=True)
    counters = simulate(module, arranged, SUNWAY)
    layout = module.tensor("output").layout
    output = arranged["output"].transpose(np.argsort(layout)) if layout else arranged["output"]
    return output, counters


def test_every_candidate_on_the_simulator():
    """120 legal candidates drawn at random, about one in twenty (every one under SWAUTO_EXHAUSTIVE),
    against the reference. Drawn one by one: building the whole space took three quarters of the time."""
    op, arrays, expected = problem(SHAPES[0])
    if os.environ.get("SWAUTO_EXHAUSTIVE"):
        legal = explore(op, SUNWAY).legal
        assert len(legal) > 500
    else:
        legal = [(candidate, lower(op, candidate, SUNWAY)) for candidate in sample_legal(op, 120, seed=8)]
        assert len(legal) == 120
    for candidate, stages in legal:
        output, _ = run_arranged_on_simulator(stages[-1][1], arrays)
        assert relative_error(output, expected) <= 1e-5, candidate


def _sample(candidates: list[Candidate], count: int, seed: int) -> list[Candidate]:
    return random.Random(seed).sample(candidates, min(count, len(candidates)))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-Ni{}-No{}-{}x{}-k{}-s{}-p{}".format(*s))
def test_sampled_candidates_on_both_backends(shape):
    op, arrays, expected = problem(shape, seed=1)
    count = 10 if os.environ.get("SWAUTO_EXHAUSTIVE") else 3  # 3 of each shape keep the suite within 10 minutes
    sampled = sample_legal(op, count, seed=sum(shape), machines=(SUNWAY, host_machine()))
    assert len(sampled) == count
    for index, candidate in enumerate(sampled):
        for target in ("host", "sw26010"):
            threads = 1 + index % 2  # the host runs half of them on two threads
            kernel = swauto.compile(CONV_SW, params_of(shape), target=target, schedule=candidate, threads=threads)
            output = arrays["output"].copy()
            kernel(input=arrays["input"], weight=arrays["weight"], output=output)
            assert relative_error(output, expected) <= 1e-5, (target, candidate)


def _compare(params: dict[str, int], candidates: list[Candidate], seed: int) -> None:
    """Each candidate compiled for both targets against the reference convolution."""
    rng = np.random.default_rng(seed)
    op = load(CONV_SW, params)
    arrays = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in op.seed.tensors}
    expected = arrays["output"] + convolution(arrays["input"], arrays["weight"], params["stride"],
                                              op.params["pad_r"], op.params["pad_c"])
    for candidate in candidates:
        for target in ("host", "sw26010"):
            kernel = swauto.compile(CONV_SW, params, target=target, schedule=candidate)
            output = arrays["output"].copy()
            kernel(input=arrays["input"], weight=arrays["weight"], output=output)
            assert relative_error(output, expected) <= 1e-5, (target, candidate)


@pytest.mark.parametrize(("kr", "kc", "pad_r", "pad_c"), [(1, 3, 0, 1), (3, 1, 1, 0), (1, 5, 0, 2)])
def test_a_kernel_padded_differently_along_rows_and_columns(kr, kc, pad_r, pad_c):
    """Inception's 1 x 7 and 7 x 1 layers: `pad_r` and `pad_c` (both `pad` by default) keep the image's size."""
    params = {"B": 2, "Ni": 8, "No": 8, "Ri": 5, "Ci": 6, "Kr": kr, "Kc": kc, "stride": 1, "pad_r": pad_r,
              "pad_c": pad_c}
    op = load(CONV_SW, params)
    assert op.seed.tensor("output").shape[:2] == (5, 6) and op.params["pad"] == 1
    _compare(params, sample_legal(op, 4, seed=kr + kc, machines=(SUNWAY, host_machine())), seed=kr)


def test_channel_blocks_where_the_weight_slice_is_large():
    """Ni = 300, No = 270: blocks of 256 channels and a last one of 44 (14), or all the channels in one block,
    both right on both targets; at 512 x 512 only blocked candidates fit the SW26010's local memory."""
    params = {"B": 2, "Ni": 300, "No": 270, "Ri": 3, "Ci": 3, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    points = list(candidates(load(CONV_SW, params)))
    blocked = [c for c in points if dict(c.splits)["K"] == 256 and dict(c.splits)["N"] == 256]
    whole = [c for c in points if dict(c.splits)["K"] == 300 and dict(c.splits)["N"] == 270]
    assert blocked and whole
    assert all(c.order[-1] == "K_outer" for c in blocked)
    # Only loops that run once (the columns, the rows in one tile) come before the loop over No blocks.
    assert all(set(c.order[: c.order.index("N_outer")]) <= {"cCo_outer", "cRo_outer"} for c in blocked)
    _compare(params, _sample(blocked, 3, seed=1) + _sample(whole, 1, seed=2), seed=3)
    params = {"B": 1, "Ni": 512, "No": 512, "Ri": 2, "Ci": 2, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    kernel = swauto.compile(CONV_SW, params, target="sw26010")
    assert dict(kernel.schedule.splits)["K"] < 512 or dict(kernel.schedule.splits)["N"] < 512
    _compare(params, [kernel.schedule], seed=4)


def _variant(candidate: Candidate, double_buffer: bool) -> Candidate:
    return Candidate(candidate.splits, candidate.order, candidate.vectorize, candidate.layouts, double_buffer)


def test_an_odd_batch_pads_its_own_axis_and_fits():
    """M = 1 x 33 padded to 64 along the batch axis (along the column axis it would be 32 x 33: no
    candidate of 256 channels fitted local memory)."""
    params = {"B": 33, "Ni": 256, "No": 256, "Ri": 3, "Ci": 3, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    kernel = swauto.compile(CONV_SW, params, target="sw26010")
    rng = np.random.default_rng(3)
    arrays = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in kernel.operator.seed.tensors}
    expected = arrays["output"] + convolution(arrays["input"], arrays["weight"], 1, 1)
    kernel(**arrays)
    assert relative_error(arrays["output"], expected) <= 1e-5
    gemms = [node for node, _ in walk(kernel.module.body) if isinstance(node, Call) and node.primitive == "gemm"]
    for access in (access for gemm in gemms for _, access in gemm.operands):
        for extent, pad, dim in zip(access.extents, access.pad or (0,) * len(access.extents), access.dims, strict=True):
            assert dim != "M" or pad == 0 or extent == 33, access  # only the batch axis gets zeros along M


def test_pixels_of_a_small_image_pad_together():
    """M = 7 rows x 7 columns (a 7 x 7 output at batch 1) is padded to 8 x 8 = 64, not 7 x 32 = 224
    along one axis: the axes carrying a dimension are padded jointly, alike in every operand. The
    candidates with the whole image in one GEMM, against the reference on both targets."""
    params = {"B": 1, "Ni": 16, "No": 8, "Ri": 14, "Ci": 14, "Kr": 1, "Kc": 1, "stride": 2, "pad": 0}
    whole = sample_legal(load(CONV_SW, params), 4, seed=None,
                         where=lambda c: (dict(c.splits)["cCo"], dict(c.splits)["cRo"], c.vectorize) == (7, 7, "N"))
    assert whole
    kernel = swauto.compile(CONV_SW, params, target="sw26010", schedule=whole[0])
    gemm = next(node for node, _ in walk(kernel.module.body) if isinstance(node, Call) and node.primitive == "gemm")
    assert gemm.size("M") == 64
    for _, access in (operand for operand in gemm.operands if "M" in operand[1].dims):
        padded = [e + p for e, p, d in zip(access.extents, access.pad or (0,) * len(access.extents), access.dims,
                                           strict=True) if d == "M" and e > 1]
        assert padded == [8, 8], access
    _compare(params, _sample(whole, 4, seed=5), seed=5)


@pytest.mark.parametrize("stride", [1, 2])
def test_rows_join_m_on_small_images_at_batch_1(stride):
    """Where one output row gives M = Co x B <= 128, conv2d.sw also fuses whole rows into M (a tile of
    r.inner rows x c.inner columns, here all of them); elsewhere the rows are not split at all (the loop
    keeps its name).
    Candidates with rows fused, strided and with a short last tile of columns, against the reference on
    both targets."""
    params = {"B": 1, "Ni": 8, "No": 8, "Ri": 13, "Ci": 13, "Kr": 3, "Kc": 3, "stride": stride, "pad": 1}
    op = load(CONV_SW, params)
    rows = {split.target: split.factors for split in op.space.splits}["cRo"]
    co = op.seed.tensor("output").shape[1]
    assert rows == tuple(sorted({1, 256 // co, 16}))  # 16 rows too: Ni <= 8, a first layer's tile
    fused = [c for c in candidates(op) if dict(c.splits)["cRo"] > 1 and dict(c.splits)["cCo"] < co]
    _compare(params, _sample(fused, 3, seed=stride), seed=stride)
    # M = Co x 32 > 128 and more than 8 channels (not a first layer): no split.
    assert "cRo" in load(CONV_SW, {**params, "B": 32, "Ni": 9}).space.loops


def test_double_buffering_moves_exactly_the_same_bytes():
    op, arrays, expected = problem(SHAPES[3])
    for candidate in sample_legal(op, 8, seed=3, where=lambda c: c.double_buffer):
        single = lower(op, _variant(candidate, False), SUNWAY)[-1][1]
        double = lower(op, candidate, SUNWAY)[-1][1]
        out_single, moved_single = run_arranged_on_simulator(single, arrays)
        out_double, moved_double = run_arranged_on_simulator(double, arrays)
        assert relative_error(out_double, expected) <= 1e-5
        assert (moved_double.dma_get_bytes, moved_double.dma_put_bytes) == (
            moved_single.dma_get_bytes, moved_single.dma_put_bytes), candidate
        assert moved_double.dma_transactions == moved_single.dma_transactions


def _features(stages) -> set[str]:
    """Which transformations a candidate's final IR shows."""
    final = dict(stages)
    features = set()
    module = final["plan_local_memory"]
    for node, _ in walk(module.body):
        if isinstance(node, Call):
            if node.operand("A").dims.count("M") > 1:  # a loop fused into M adds an axis carrying it
                features.add("fusion")
            if any(access.pad and any(access.pad) for _, access in node.operands):
                features.add("padding")
        if isinstance(node, Dma) and node.zero_fill:
            features.add("zero-filled")
    if final["hoist_dma"] != final["infer_dma"]:
        features.add("hoisting")
    if final["peel_boundaries"] != final["schedule"] and "_2" in format_module(module):
        features.add("boundaries")
    if "double_buffer" in final:
        features.add("double buffering")
    return features


def test_double_buffering_with_every_other_transformation():
    """Double buffering combined with hoisting, fusion into the primitive, padding and peeled
    boundaries (the combinations TVM users report breaking), each checked on both backends."""
    shape = (2, 8, 8, 6, 7, 3, 1, 1)  # Co = 7: every split but 1 leaves a boundary tile
    op, arrays, expected = problem(shape, seed=2)
    wanted = ["hoisting", "fusion", "padding", "boundaries", "zero-filled"]
    found: dict[str, Candidate] = {}
    everything = None
    for candidate in candidates(op, (True,)):  # until each feature and all of them at once are found
        try:
            features = _features(lower(op, candidate, SUNWAY))
        except Rejected:
            continue
        for feature in features & set(wanted):
            found.setdefault(feature, candidate)
        if everything is None and set(wanted) <= features:
            everything = candidate
        if everything and len(found) == len(wanted):
            break
    assert set(found) == set(wanted)
    assert everything, "no double-buffered candidate combines all the transformations"
    for candidate in [*found.values(), everything]:
        for target in ("sw26010", "host"):
            kernel = swauto.compile(CONV_SW, params_of(shape), target=target, schedule=candidate)
            output = arrays["output"].copy()
            kernel(input=arrays["input"], weight=arrays["weight"], output=output)
            assert relative_error(output, expected) <= 1e-5, (target, candidate)


def test_kernel_converts_layouts_at_its_boundary():
    op, arrays, expected = problem(SHAPES[0])
    permuted = {"input": (0, 1, 3, 2), "output": (0, 1, 3, 2), "weight": (0, 1, 3, 2)}
    (candidate,) = sample_legal(op, 1, seed=0, machines=(host_machine(),), where=lambda c: dict(c.layouts) == permuted)
    kernel = swauto.compile(CONV_SW, params_of(SHAPES[0]), target="host", schedule=candidate)
    assert kernel.layouts == {"input": (0, 1, 3, 2), "output": (0, 1, 3, 2), "weight": (0, 1, 3, 2)}
    output = arrays["output"].copy()
    kernel(input=arrays["input"], weight=arrays["weight"], output=output)
    assert relative_error(output, expected) <= 1e-5
    assert kernel.report["layout_conversion_s"] > 0
    # A framework can hand the data over already arranged.
    arranged_output = np.ascontiguousarray(arrays["output"].transpose(0, 1, 3, 2))
    kernel.run_arranged(input=np.ascontiguousarray(arrays["input"].transpose(0, 1, 3, 2)),
                        weight=np.ascontiguousarray(arrays["weight"].transpose(0, 1, 3, 2)), output=arranged_output)
    assert relative_error(arranged_output.transpose(0, 1, 3, 2), expected) <= 1e-5


def test_padding_reads_zeros_without_a_padded_copy():
    """pad = 2: the input is never copied; border tiles move only their part inside the image."""
    op, arrays, expected = problem(SHAPES[1])
    (candidate,) = sample_legal(op, 1, seed=0)
    final = lower(op, candidate, SUNWAY)[-1][1]
    assert final.tensor("input").shape == op.seed.tensor("input").shape
    zero_filled = [n for n, _ in walk(final.body) if isinstance(n, Dma) and n.zero_fill]
    assert zero_filled and all(n.tensor.name == "input" for n in zero_filled)
    output, counters = run_arranged_on_simulator(final, arrays)
    assert relative_error(output, expected) <= 1e-5


def test_figure_6_2_golden_ir():
    """The thesis' own example: split the output columns, reorder, fuse the inner part into the
    GEMM's M, row-major layouts (the weight [Kr, Kc, Ni, No], as conv2d.sw keeps it), vectorize N;
    double buffered."""
    params = {"B": 8, "Ni": 64, "No": 128, "Ri": 28, "Ci": 28, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(CONV_SW, params)
    candidate = Candidate(
        (("cCo", 4), ("N", 128), ("K", 64)), ("N_outer", "K_outer", "cRo", "cCo_outer", "cKr", "cKc"), "N",
        (("input", (0, 1, 2, 3)), ("output", (0, 1, 2, 3)), ("weight", (0, 1, 3, 2))), True,
    )
    assert_golden_stages(op, candidate, "conv2d_figure_6_2.txt")


def test_fusing_two_loops_into_one():
    text = CONV_SW.read_text()
    schedule = text[text.index("  schedule {"):]
    text = text.replace(schedule, "  schedule {\n    fuse cKr, cKc\n    reorder any\n  }\n}\n")
    shape = SHAPES[3]
    op = load(text, params_of(shape))
    _, arrays, expected = problem(shape)
    space = explore(op, SUNWAY)
    assert {c.order for c in space.candidates} >= {("cRo", "cCo", "cKr_cKc"), ("cKr_cKc", "cRo", "cCo")}
    for candidate, stages in space.legal:
        output, _ = run_arranged_on_simulator(stages[-1][1], arrays)
        assert relative_error(output, expected) <= 1e-5, candidate


@pytest.mark.skipif(not os.environ.get("SWAUTO_EXHAUSTIVE"), reason="set SWAUTO_EXHAUSTIVE=1 (minutes)")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-Ni{}-No{}-{}x{}-k{}-s{}-p{}".format(*s))
def test_every_candidate_on_the_host(shape):
    """Every candidate compiled for the host: too slow for every run, run before a release."""
    op, arrays, expected = problem(shape, seed=4)
    for candidate in swauto.schedules(CONV_SW, params_of(shape), target="host"):
        kernel = swauto.compile(CONV_SW, params_of(shape), target="host", schedule=candidate, threads=2)
        output = arrays["output"].copy()
        kernel(input=arrays["input"], weight=arrays["weight"], output=output)
        assert relative_error(output, expected) <= 1e-5, candidate


def _check_shared_bytes(sharing) -> None:
    """On three legal candidates of a 40 -> 48 channel, 7 x 7 layer whose final IR has buffers in the
    same bytes that `sharing(final, live)` picks (pairs of names): no two of them are live at
    once, and the functional simulator, which checks every read against the last write to its bytes,
    computes the reference's result."""
    op, arrays, expected = problem((8, 40, 48, 7, 7, 3, 1, 1))
    checked = 0
    for candidate in candidates(op, (False, True)):
        try:
            final = lower(op, candidate, SUNWAY)[-1][1]
        except Rejected:
            continue
        live = live_ranges(final)
        spans = {b.name: (b.offset, b.offset + per_cpe_bytes(b, SUNWAY)) for b in final.buffers}
        shared = [(a, b) for a, b in sharing(final, live) if a < b and spans[a][0] < spans[b][1]
                  and spans[b][0] < spans[a][1]]
        if not shared:
            continue
        assert not any(live[a].overlaps(live[b]) for a, b in shared)
        output, _ = run_arranged_on_simulator(final, arrays)
        assert relative_error(output, expected) <= 1e-5, candidate
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_the_float64_copies_of_peeled_tiles_share_local_memory():
    """The GEMM's float64 copy of a tile holds a value only while a call on its buffer runs (it
    converts in and back): the copies of the peeled tiles' calls, which run one after another, share
    bytes where their live ranges (the calls) do not overlap."""
    def twins(final, live):
        names = [b.name for b in final.buffers if b.copy_of is not None]
        return [(a, b) for a in names for b in names]

    _check_shared_bytes(twins)


def test_peeled_copies_inside_a_loop_share_local_memory():
    """A loop's last iteration peeled inside another loop: its copy's buffers and the whole tiles' are
    live in different stretches of the outer loop's body (`live_ranges` at that depth: each written
    before it is read in every iteration), so they may share bytes, which a plan by top-level
    statements could not give them."""
    def inner(final, live):
        names = [b.name for b in final.buffers if b.copy_of is None]
        return [(a, b) for a in names for b in names if live[a].scope[:1] and live[a].scope[:1] == live[b].scope[:1]]

    _check_shared_bytes(inner)


@pytest.mark.parametrize("shape", [(1, 3, 8, 9, 11, 3, 2, 1), (2, 3, 8, 7, 9, 5, 1, 2), (3, 5, 7, 6, 10, 3, 3, 0)],
                         ids=lambda s: "B{}-Ni{}-No{}-{}x{}-k{}-s{}-p{}".format(*s))
def test_kernel_columns_and_rows_join_k_where_the_input_has_few_channels(shape):
    """With Ni <= 32, conv2d.sw lets the kernel's columns, then its rows, join K. With output columns in
    M, the input's tile is then a window: its column axis is walked by two axes of the box (columns in M
    at the stride's step, taps in K), so its rows overlap. Candidates with windows (strided, padded, with
    a short last tile of columns) against the reference on both targets."""
    params = params_of(shape)
    joined = [c for c in candidates(load(CONV_SW, params)) if not c.double_buffer
              and dict(c.splits)["cKc"] > 1 and dict(c.splits)["cCo"] > 1]
    assert joined and any(dict(c.splits)["cKr"] > 1 for c in joined)
    module = lower(load(CONV_SW, params), joined[0], SUNWAY)[-1][1]
    windows = [node.tensor for node, _ in walk(module.body) if isinstance(node, Dma) and node.tensor.walks]
    assert windows and all(sorted(set(box.walks)) == [0, 1, 2, 3] and len(box.walks) > 4 for box in windows)
    _compare(params, _sample(joined, 8, seed=shape[4]), seed=shape[5])
    assert "cKc" in load(CONV_SW, {**params, "Ni": 33}).space.loops  # more channels: the space is unchanged


def test_a_first_layer_and_its_relu6_join_taps_to_k_as_conv2d_sw_does():
    """conv2d_relu6.sw (the whole-model library's form of MobileNetV2's stem) has conv2d.sw's windows
    at Ni = 3, with the clamp fused into the GEMM's tiles or not: both targets against the reference."""
    source = EXAMPLES / "conv2d_relu6.sw"
    params = {"B": 1, "Ni": 3, "No": 8, "Ri": 9, "Ci": 11, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1}
    joined = [c for c in candidates(load(source, params)) if not c.double_buffer
              and dict(c.splits)["cKc"] > 1 and dict(c.splits)["cKr"] > 1 and dict(c.splits)["cCo"] > 1]
    rng = np.random.default_rng(5)
    arrays = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in load(source, params).seed.tensors}
    expected = np.clip(arrays["output"] + convolution(arrays["input"], arrays["weight"], 2, 1), 0, 6)
    chosen = _sample([c for c in joined if c.fused], 2, seed=1) + _sample([c for c in joined if not c.fused], 1, seed=2)
    for candidate in chosen:
        for target in ("host", "sw26010"):
            output = arrays["output"].copy()
            swauto.compile(source, params, target=target, schedule=candidate)(
                input=arrays["input"], weight=arrays["weight"], output=output)
            assert relative_error(output, expected) <= 1e-5, (target, candidate)


def test_a_first_layer_window_golden_ir():
    """ResNet's first layer in small (3 channels, 7 x 7, stride 2, pad 3): 4 output columns in M, the
    kernel's columns and rows in K. The input's transfer is a window (`@axis`: the tensor axis each of
    its axes walks), zero-filled at the image's edge; the SW26010's stages, double buffered."""
    params = {"B": 1, "Ni": 3, "No": 16, "Ri": 11, "Ci": 11, "Kr": 7, "Kc": 7, "stride": 2, "pad": 3}
    op = load(CONV_SW, params)
    candidate = Candidate(
        (("cCo", 4), ("cRo", 1), ("cKc", 7), ("cKr", 7), ("N", 16), ("K", 3)),
        ("cKr_outer", "cKc_outer", "N_outer", "K_outer", "cRo_outer", "cCo_outer"), "M",
        (("input", (0, 1, 2, 3)), ("output", (0, 1, 2, 3)), ("weight", (0, 1, 3, 2))), True,
    )
    assert_golden_stages(op, candidate, "conv2d_first_layer_window.txt")
