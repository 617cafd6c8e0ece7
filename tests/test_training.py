"""Training operators (issue 10, item 4): the convolution's backward-data and backward-weight and the
fully connected layer's backward pass (examples/conv2d_backward_data.sw, conv2d_backward_weight.sw and
fc_backward.sw), compiled through the scheduler on both targets and compared with direct float64 NumPy
references (written here, not swauto's own `reference`), plus golden IR after every pass.

At each test shape (small odd sizes; stride 1 and 2, pad 0 and 1; a kernel narrower than the stride; a
kernel larger than the output image) a spread sample of the space runs on the SW26010's functional
simulator and, JIT-compiled in forked children with a timeout, on the host. The sample is found without
building the whole space: only the sampled points are lowered. The outputs are filled with garbage
before a call (they are overwritten); a backward-data kernel is called twice (the scratch tensor its
scatter writes must not carry anything from one call to the next). `SWAUTO_EXHAUSTIVE=1` runs every
legal candidate of every shape on both targets, and the thesis' large-kernel shape at full size.

The host model's calibration is made up here (as in tests/test_host_model.py): it only prices candidates,
which these tests do not look at, and measuring it would take most of this file's time budget when the
file runs alone.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from isolation import run_isolated
from test_host_model import quiet_machine

import swauto
from conftest import EXAMPLES, assert_golden_stages, relative_error
from swauto.api import load
from swauto.errors import Rejected
from swauto.frontend.check import BoundOperator
from swauto.machine import local_memory_machine
from swauto.pipeline import lower
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import candidates as space_points
from swauto.tuner import host_model

EXHAUSTIVE = bool(os.environ.get("SWAUTO_EXHAUSTIVE"))
SAMPLE = {"sw26010": 6, "host": 3}  # candidates run per shape and target unless SWAUTO_EXHAUSTIVE is set
TOLERANCE = 1e-4  # max abs error / max abs reference, as `swauto run` checks
TIMEOUT = float(os.environ.get("SWAUTO_TIMEOUT") or 60.0)


def _conv(B, Ni, No, Ri, Ci, Kr, Kc, stride, pad):  # noqa: N803 - the operators' parameter names
    return {"B": B, "Ni": Ni, "No": No, "Ri": Ri, "Ci": Ci, "Kr": Kr, "Kc": Kc, "stride": stride, "pad": pad}


# (label, sizes) per example: the label names the shape in test ids.
SHAPES = {
    "conv2d_backward_data": [
        ("stride1-pad1", _conv(3, 5, 6, 5, 5, 3, 3, 1, 1)),
        # The last input row and column are not reached by any output pixel: the crop reads them
        # past the end of the scatter's scratch tensor (zeros).
        ("stride2-pad0", _conv(2, 3, 5, 6, 7, 3, 2, 2, 0)),
        # Kc = 1 < stride: every other column of the scratch tensor is never written.
        ("stride2-pad1-gaps", _conv(3, 4, 5, 5, 6, 3, 1, 2, 1)),
    ],
    "conv2d_backward_weight": [
        ("stride1-pad1", _conv(3, 5, 6, 5, 5, 3, 3, 1, 1)),
        ("stride2-pad0", _conv(2, 3, 5, 7, 6, 3, 2, 2, 0)),
        # The thesis' large-kernel case, scaled down: a 3 x 3 output image and a 6 x 6 kernel.
        ("large-kernel", _conv(2, 3, 4, 8, 8, 6, 6, 1, 0)),
    ],
    "fc_backward": [
        ("b5-in130-out300", {"B": 5, "In": 130, "Out": 300}),
    ],
}
CASES = [pytest.param(name, params, id=f"{name}-{label}") for name, shapes in SHAPES.items()
         for label, params in shapes]


# --- the references: direct float64 NumPy ---------------------------------------------------------------


def _taps(padded: np.ndarray, kr: int, kc: int, stride: int, ro: int, co: int) -> np.ndarray:
    """The rows and columns of the padded image that kernel tap (kr, kc) meets, one per output pixel."""
    return padded[kr:kr + stride * (ro - 1) + 1:stride, kc:kc + stride * (co - 1) + 1:stride]


def conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """examples/conv2d.sw: output[Ro, Co, No, B] from input[Ri, Ci, Ni, B] and weight[Kr, Kc, No, Ni]."""
    (ri, ci, _, _), (kr_, kc_) = x.shape, w.shape[:2]
    ro, co = (ri + 2 * pad - kr_) // stride + 1, (ci + 2 * pad - kc_) // stride + 1
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0), (0, 0)))
    return sum(np.einsum("rcib,oi->rcob", _taps(xp, kr, kc, stride, ro, co), w[kr, kc])
               for kr in range(kr_) for kc in range(kc_))


def conv2d_backward_data(grad_output: np.ndarray, w: np.ndarray, input_shape: tuple[int, ...], stride: int,
                         pad: int) -> np.ndarray:
    """The gradient of conv2d's input: each output pixel's gradient scattered back through each tap into
    the padded image, whose inside is the result."""
    ro, co = grad_output.shape[:2]
    ri, ci = input_shape[:2]
    padded = np.zeros((ri + 2 * pad, ci + 2 * pad, *input_shape[2:]))
    for kr in range(w.shape[0]):
        for kc in range(w.shape[1]):
            _taps(padded, kr, kc, stride, ro, co)[...] += np.einsum("rcob,oi->rcib", grad_output, w[kr, kc])
    return padded[pad:pad + ri, pad:pad + ci]


def conv2d_backward_weight(x: np.ndarray, grad_output: np.ndarray, kernel: tuple[int, int], stride: int,
                           pad: int) -> np.ndarray:
    """The gradient of conv2d's weight: for each tap, grad_output against the image it met."""
    ro, co = grad_output.shape[:2]
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0), (0, 0)))
    return np.array([[np.einsum("rcob,rcib->oi", grad_output, _taps(xp, kr, kc, stride, ro, co))
                      for kc in range(kernel[1])] for kr in range(kernel[0])])


def expected(name: str, params: dict[str, int], arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The example's outputs, in float64."""
    a = {key: value.astype(np.float64) for key, value in arrays.items()}
    if name == "fc_backward":
        return {"grad_x": a["grad_y"] @ a["weight"].T, "grad_weight": a["x"].T @ a["grad_y"],
                "grad_bias": a["grad_y"].sum(axis=0)}
    stride, pad = params["stride"], params["pad"]
    if name == "conv2d_backward_data":
        return {"grad_input": conv2d_backward_data(a["grad_output"], a["weight"], arrays["grad_input"].shape,
                                                   stride, pad)}
    return {"grad_weight": conv2d_backward_weight(a["input"], a["grad_output"], (params["Kr"], params["Kc"]),
                                                  stride, pad)}


def _inputs(op: BoundOperator, seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for every argument, outputs included (their contents must not matter)."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors if not t.is_local}


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("pad", [0, 1])
def test_references_are_the_adjoints_of_the_forward_convolution(stride, pad):
    """<conv2d(x, w), g> = <x, backward_data(g, w)> = <w, backward_weight(x, g)>: the references above are
    the gradients of the forward convolution (which tests/test_operators.py checks against PyTorch's)."""
    rng = np.random.default_rng(stride + 2 * pad)
    x, w = rng.standard_normal((7, 6, 3, 2)), rng.standard_normal((3, 2, 4, 3))
    y = conv2d(x, w, stride, pad)
    g = rng.standard_normal(y.shape)
    forward = np.vdot(y, g)
    assert np.isclose(np.vdot(x, conv2d_backward_data(g, w, x.shape, stride, pad)), forward, rtol=1e-12)
    assert np.isclose(np.vdot(w, conv2d_backward_weight(x, g, w.shape[:2], stride, pad)), forward, rtol=1e-12)


# --- the candidates ------------------------------------------------------------------------------------


MADE_UP_CALIBRATION = quiet_machine("made-up")


@pytest.fixture(scope="module", autouse=True)
def _made_up_host_calibration():
    """The host model prices with a made-up calibration in this module (forked children inherit it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(host_model, "machine", lambda cache_dir=None: MADE_UP_CALIBRATION)
        yield


def _legal(op: BoundOperator, target: str, candidate: Candidate) -> bool:
    try:
        lower(op, candidate, local_memory_machine(target))
    except Rejected:
        return False
    return True


@functools.cache
def candidates(name: str, items: tuple[tuple[str, int], ...], target: str) -> tuple[Candidate, ...]:
    """Every legal candidate (SWAUTO_EXHAUSTIVE), else SAMPLE[target] legal ones drawn at random (seeded by
    the example, shape and target) from the points of the space, in the space's order; on the host the
    micro-kernels alternate."""
    params = dict(items)
    if EXHAUSTIVE:
        return tuple(swauto.schedules(EXAMPLES / f"{name}.sw", params=params, target=target))
    op = load(EXAMPLES / f"{name}.sw", params)
    machine = local_memory_machine(target)
    points = list(space_points(op, (False, True) if machine.asynchronous_dma else (False,)))
    kernels = machine.micro_kernels
    chosen: dict[int, Candidate] = {}
    for index in random.Random(f"{name} {items} {target}").sample(range(len(points)), len(points)):
        point = points[index]
        if kernels:
            point = dataclasses.replace(point, micro_kernel=kernels[len(chosen) % len(kernels)])
        if _legal(op, target, point):
            chosen[index] = point
            if len(chosen) == SAMPLE[target]:
                break
    return tuple(chosen[index] for index in sorted(chosen))


def _run(name: str, params: dict[str, int], target: str, candidate: Candidate) -> float:
    """The largest relative error of `candidate`'s outputs (over two calls of one kernel for backward-data,
    whose scratch tensor must not carry anything from one call to the next)."""
    kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target=target, schedule=candidate)
    worst = 0.0
    for seed in (0, 1) if name == "conv2d_backward_data" else (0,):
        arrays = _inputs(kernel.operator, seed)
        want = expected(name, params, arrays)
        for output in want:
            arrays[output][...] = np.float32(1e6 * (seed + 1))  # garbage: the outputs are overwritten
        kernel(**arrays)
        worst = max([worst, *(relative_error(arrays[output], value) for output, value in want.items())])
    return worst


@pytest.mark.parametrize(("name", "params"), CASES)
def test_sw26010_candidates_match_numpy(name, params):
    runs = candidates(name, tuple(params.items()), "sw26010")
    assert runs
    errors = {candidate.id: _run(name, params, "sw26010", candidate) for candidate in runs}
    assert max(errors.values()) < TOLERANCE, sorted(errors.items(), key=lambda item: -item[1])[:3]


@pytest.mark.parametrize(("name", "params"), CASES)
def test_host_candidates_match_numpy(name, params):
    runs = candidates(name, tuple(params.items()), "host")
    assert runs
    outcomes = run_isolated(lambda candidate: _run(name, params, "host", candidate), runs, timeout=TIMEOUT,
                            workers=2, labels=[f"{c.id} {c.describe()}" for c in runs])
    failed = [str(outcome) for outcome in outcomes if not outcome.ok or not outcome.value < TOLERANCE]
    assert not failed, failed


GOLDEN = {"conv2d_backward_data": "stride2-pad0", "conv2d_backward_weight": "stride1-pad1",
          "fc_backward": "b5-in130-out300"}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_ir_after_every_pass(name):
    """The first legal SW26010 candidate's IR after every stage (SWAUTO_UPDATE_GOLDEN=1 rewrites it)."""
    params = dict(SHAPES[name])[GOLDEN[name]]
    op = load(EXAMPLES / f"{name}.sw", params)
    first = next(point for point in space_points(op, (False, True)) if _legal(op, "sw26010", point))
    assert_golden_stages(op, first, f"{name}.txt")


def test_the_scatter_is_legal_at_every_stride_and_pad():
    """The backward-data seed lowers at strides 1 - 3 and pads 0 - 2, kernels narrower and wider than the
    stride (the sizes of an index are checked when the operator is bound, for every parameter)."""
    for stride in (1, 2, 3):
        for pad in (0, 1, 2):
            for kernel in (1, 3):
                op = load(EXAMPLES / "conv2d_backward_data.sw",
                          _conv(2, 3, 4, 7, 5, kernel, kernel + 1, stride, pad))
                assert any(_legal(op, "sw26010", point) for point in space_points(op, (False,)))


def test_swauto_run_on_the_fc_backward_example():
    """`swauto run` (a user's command, in a process of its own): tunes the fc example at the test sizes on
    the SW26010, runs it on random inputs and compares with the reference (the convolutions' larger spaces
    are checked in-process above)."""
    script = Path(sys.executable).with_name("swauto")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "swauto.cli"]
    sizes = [arg for key, value in dict(SHAPES["fc_backward"])["b5-in130-out300"].items()
             for arg in ("-D", f"{key}={value}")]
    result = subprocess.run([*command, "run", str(EXAMPLES / "fc_backward.sw"), *sizes, "--target", "sw26010"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "relative to the NumPy float64 reference: ok" in result.stdout


@pytest.mark.skipif(not EXHAUSTIVE, reason="set SWAUTO_EXHAUSTIVE=1 (minutes)")
def test_thesis_large_kernel_backward_weight_runs():
    """The thesis' large-kernel shape (a 3 x 3 output image, 32 x 32 kernels, B = 32, 64 channels): the
    model's pick on the SW26010, run on the simulator, against NumPy."""
    params = _conv(32, 64, 64, 34, 34, 32, 32, 1, 0)
    kernel = swauto.compile(EXAMPLES / "conv2d_backward_weight.sw", params=params, target="sw26010")
    arrays = _inputs(kernel.operator)
    want = expected("conv2d_backward_weight", params, arrays)
    kernel(**arrays)
    assert relative_error(arrays["grad_weight"], want["grad_weight"]) < TOLERANCE
