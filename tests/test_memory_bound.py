"""Memory-bound operators (issue 10, thesis 5.3): batch normalization on its own
(examples/batchnorm.sw) and folded into a convolution with ReLU (examples/conv2d_bn_relu.sw).

A spread sample of each space, as many candidates of each fusion choice, runs on the SW26010's
functional simulator and, JIT-compiled, on the host (in forked children with a timeout), against a
float64 NumPy reference written here (not swauto's own reference interpreter); `SWAUTO_EXHAUSTIVE=1`
runs every legal candidate on both. The sample is drawn from the space's points without building the
whole space (the convolution's has 1536 points; building them all takes seconds), so the file stays
within a few seconds.
"""

from __future__ import annotations

import functools
import itertools
import os
import random

import numpy as np
import pytest
from isolation import run_isolated
from test_host_model import quiet_machine

import swauto
from conftest import EXAMPLES, assert_golden_stages, relative_error
from swauto import targets
from swauto.api import load
from swauto.errors import Rejected
from swauto.pipeline import lower
from swauto.schedule.space import candidates
from swauto.tuner import host_model

# Small odd sizes: splits leave shorter last tiles (peeled); the GEMM pads B = 3 on the SW26010.
OPERATORS = {
    "batchnorm": {"B": 3, "Ch": 5, "R": 5, "C": 9},
    "conv2d_bn_relu": {"B": 3, "Ni": 5, "No": 6, "Ri": 3, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
}
PER_FUSION = {"sw26010": 3, "host": 2}  # candidates run per fusion choice and target (unless exhaustive)


@pytest.fixture(autouse=True, scope="module")
def _no_host_calibration():
    """These tests check results, not predictions: a host kernel's report prices it with made-up machine
    constants instead of measuring this machine (about 10 s, once per session, stored in the session's
    cache folder; nothing is stored from here)."""
    made_up = quiet_machine()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(host_model, "machine", lambda cache_dir=None: made_up)
        yield


def _inputs(op, seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for every tensor, outputs included (they must be overwritten)."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors if not t.is_local}


def _expected(name: str, p: dict[str, int], a: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
    """(the output's name, its value in float64 NumPy)."""
    f = {key: value.astype(np.float64) for key, value in a.items()}
    if name == "batchnorm":  # x, y [R, C, Ch, B]; scale, shift [Ch]
        return "y", f["x"] * f["scale"][:, None] + f["shift"][:, None]
    pad, stride = p["pad"], p["stride"]  # input [Ri, Ci, Ni, B], weight [Kr, Kc, No, Ni], output [Ro, Co, No, B]
    ro = (p["Ri"] + 2 * pad - p["Kr"]) // stride + 1
    co = (p["Ci"] + 2 * pad - p["Kc"]) // stride + 1
    x = np.pad(f["input"], ((pad, pad), (pad, pad), (0, 0), (0, 0)))
    out = np.zeros((ro, co, p["No"], p["B"]))
    for kr in range(p["Kr"]):
        for kc in range(p["Kc"]):
            view = x[kr:kr + stride * (ro - 1) + 1:stride, kc:kc + stride * (co - 1) + 1:stride]
            out += np.einsum("rcib,oi->rcob", view, f["weight"][kr, kc])
    return "output", np.maximum(out * f["scale"][:, None] + f["shift"][:, None], 0)


@functools.cache
def _operator(name: str):
    return load(EXAMPLES / f"{name}.sw", OPERATORS[name])


@functools.cache
def _points(name: str) -> tuple:
    """Every point of the space (legal or not, single and double buffered), without lowering any."""
    return tuple(candidates(_operator(name)))


def _legal(name: str, target: str, candidate) -> bool:
    machine = targets.get(target).machine()
    if candidate.double_buffer and not machine.asynchronous_dma:
        return False
    try:
        lower(_operator(name), candidate, machine)
    except Rejected:
        return False
    return True


@functools.cache
def _sample(name: str, target: str) -> tuple:
    """PER_FUSION legal candidates of each fusion choice, drawn from its points in a fixed pseudo-random
    order (so splits, loop orders, vectorized dimensions and buffering all vary); every legal candidate
    with SWAUTO_EXHAUSTIVE."""
    if os.environ.get("SWAUTO_EXHAUSTIVE"):
        return tuple(swauto.schedules(EXAMPLES / f"{name}.sw", params=OPERATORS[name], target=target))
    groups: dict[tuple[str, ...], list] = {}
    for point in _points(name):
        groups.setdefault(point.fused, []).append(point)
    chosen = []
    for fused, group in groups.items():
        shuffled = random.Random(f"{name} {target} {fused}").sample(group, len(group))
        legal = (candidate for candidate in shuffled if _legal(name, target, candidate))
        chosen += itertools.islice(legal, PER_FUSION[target])
    return tuple(chosen)


def _run(name: str, target: str, candidate) -> float:
    """The relative error of `candidate`'s result against the NumPy reference."""
    params = OPERATORS[name]
    kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target=target, schedule=candidate)
    arrays = _inputs(kernel.operator)
    output, expected = _expected(name, params, arrays)
    kernel(**arrays)
    return relative_error(arrays[output], expected)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_sw26010_candidates_match_the_reference(name):
    sample = _sample(name, "sw26010")
    fusions = {c.fused for c in sample}
    assert len(fusions) == len({p.fused for p in _points(name)}), "every fusion choice has a legal candidate"
    errors = {candidate.id: _run(name, "sw26010", candidate) for candidate in sample}
    assert max(errors.values()) < 1e-5, sorted(errors.items(), key=lambda item: -item[1])[:3]


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_host_candidates_match_the_reference(name):
    sample = _sample(name, "host")
    assert len({c.fused for c in sample}) == len({p.fused for p in _points(name)})
    outcomes = run_isolated(lambda candidate: _run(name, "host", candidate), sample, labels=[c.id for c in sample])
    failed = [str(outcome) for outcome in outcomes if not outcome.ok or outcome.value >= 1e-5]
    assert not failed, failed


def test_fused_batchnorm_moves_each_element_once():
    """With the shift fused into the scaling, the SW26010 program reads x once and writes y once (plus
    the two parameter vectors); apart, the shift's pass reads and writes y again."""
    params = OPERATORS["batchnorm"]
    elements = params["R"] * params["C"] * params["Ch"] * params["B"]
    once = 4 * (2 * elements + 2 * params["Ch"])
    for candidate in _sample("batchnorm", "sw26010"):
        kernel = swauto.compile(EXAMPLES / "batchnorm.sw", params=params, target="sw26010", schedule=candidate)
        expected = once if candidate.fused else once + 4 * 2 * elements
        assert kernel.report["dma_bytes"] == expected, candidate.describe()


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_batchnorm_fuses_on_a_one_pixel_image(target):
    """R = C = 1 (a small network's last stage): a loop that runs once indexes each axis of size 1, and
    the statements still write the whole output once per element, so the shift may be fused (the
    check once refused the operator at these sizes)."""
    params = {"B": 2, "Ch": 8, "R": 1, "C": 1}
    kernel = swauto.compile(EXAMPLES / "batchnorm.sw", params=params, target=target)
    assert any(point.fused for point in candidates(kernel.operator))
    arrays = _inputs(kernel.operator)
    output, expected = _expected("batchnorm", params, arrays)
    kernel(**arrays)
    assert relative_error(arrays[output], expected) < 1e-6


def _first_legal(name: str, fused: tuple[str, ...]):
    return next(c for c in _points(name) if c.fused == fused and _legal(name, "sw26010", c))


@pytest.mark.parametrize(("name", "fused"), [("batchnorm", ()), ("batchnorm", ("shifted",)),
                                             ("conv2d_bn_relu", ("scaled", "shifted", "relu"))])
def test_golden_ir_after_every_pass(name, fused):
    """The first legal candidate of a fusion choice, printed after every stage (SWAUTO_UPDATE_GOLDEN=1
    rewrites the files)."""
    suffix = "_fused" if fused else ""
    assert_golden_stages(_operator(name), _first_legal(name, fused), f"{name}{suffix}.txt")
