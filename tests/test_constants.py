"""Constant inputs (`swauto.compile(constants=...)`): the statements that compute from them alone run once,
as a prologue (`swauto.frontend.constants`); the kernel, prepared or not, computes what the operator does."""

from __future__ import annotations

import numpy as np
import pytest

import swauto
from conftest import EXAMPLES, relative_error
from swauto.api import load
from swauto.errors import ArgumentError
from swauto.frontend.constants import split_constants
from swauto.frontend.parser import parse
from swauto.frontend.source import Source
from swauto.reference import reference

WINOGRAD = {"B": 3, "Ni": 5, "No": 6, "Ri": 7, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
CASES = [  # (example, sizes, constants)
    ("conv2d_winograd4", WINOGRAD, ["weight"]),
    ("conv2d_winograd", {**WINOGRAD, "Ri": 6, "Ci": 9}, ["weight"]),
    ("conv2d", {"B": 2, "Ni": 5, "No": 6, "Ri": 5, "Ci": 4, "Kr": 3, "Kc": 3, "stride": 1, "pad_r": 1, "pad_c": 1},
     ["weight"]),
    ("fc_bias_relu", {"B": 5, "In": 13, "Out": 30}, ["weight", "bias"]),
]

# A prologue's statement whose output a later statement writes again: not constant, so no prologue.
REWRITTEN = """
operator rewritten(M = 4, N = 8, K = 8) {
  tensor x[M, K]
  tensor w[K, N]
  tensor y[M, N]
  tensor t[K, N] local
  compute {
    doubled: scale(M = K, N = N, X = w, Z = t, by = 2.0)
    gemm(M = M, N = N, K = K, A = x, B = t, C = y)
    again: copy(M = K, N = N, X = w, Z = t)
  }
}
"""


def _arrays(kernel: swauto.Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in kernel.shapes.items()}


def _split(name: str, constants: list[str]):
    return split_constants(parse(Source.load(EXAMPLES / f"{name}.sw")), constants)


def test_a_winograd_convolutions_filter_transforms_are_its_prologue():
    split = _split("conv2d_winograd4", ["weight"])
    assert [statement.body[0].body[0].name for statement in split.prologue.compute] == ["filter_rows", "filter_cols"]
    assert split.handed == ("U",)
    body = {t.name: t.local for t in split.body.tensors}
    assert "weight" not in body and "Gg" not in body and body["U"] is False  # U: an input of the body
    assert {t.name: t.local for t in split.prologue.tensors} == {"weight": False, "Gg": True, "U": False}
    # Each part keeps the directives that name its loops: the filter's channel blocks, the GEMMs' tiles.
    assert {str(d.target) for d in split.prologue.schedule if hasattr(d, "target")} == {"fo", "fo2"}
    assert "gc" in {str(d.target) for d in split.body.schedule if hasattr(d, "target")}


def test_nothing_splits_where_no_statement_computes_from_the_constants_alone_or_its_result_is_rewritten():
    assert _split("conv2d", ["weight"]) is None  # its one statement reads the input
    assert _split("conv2d_winograd4", ["input"]) is None  # the filter transforms read the weights
    assert split_constants(parse(Source.load(REWRITTEN)), ["w"]) is None


@pytest.mark.parametrize("target", ["host", "sw26010"])
@pytest.mark.parametrize(("name", "params", "constants"), CASES, ids=[case[0] for case in CASES])
def test_a_kernel_with_constants_computes_the_operator_called_whole_prepared_or_arranged(name, params, constants,
                                                                                       target, monkeypatch):
    """The kernel's results, called whole, prepared or arranged, and the IR of its and its prologue's
    stages verified; not every candidate its compile lowers (on the SW26010 60 - 70% of the Winograd cases'
    time; test_operators verifies every candidate of the unsplit examples)."""
    from swauto.ir import verify

    monkeypatch.setenv("SWAUTO_VERIFY", "0")
    kernel = swauto.compile(EXAMPLES / f"{name}.sw", params, target=target, constants=constants)
    for part in (kernel, kernel.prologue):
        for stage, module in part.stages if part is not None else ():
            verify.verify(module, stage)
    assert kernel.constants == tuple(constants)
    assert (kernel.prologue is not None) == name.startswith("conv2d_winograd")
    arrays = _arrays(kernel)
    expected = reference(load(EXAMPLES / f"{name}.sw", params), arrays)
    out = next(t.name for t in load(EXAMPLES / f"{name}.sw", params).seed.tensors if t.is_output)

    whole = {key: value.copy() for key, value in arrays.items()}
    kernel(**whole)
    assert relative_error(whole[out], expected[out]) < 1e-4

    prepared = kernel.prepare(**{c: arrays[c] for c in constants})
    assert set(prepared.tensors) == set(kernel.tensors) - set(constants)
    for array in (arrays[c] for c in constants):
        array += 1.0  # the prepared kernel keeps what it computed from the constants as they were
    rest = {key: value.copy() for key, value in arrays.items() if key not in constants}
    prepared(**rest)
    assert relative_error(rest[out], expected[out]) < 1e-4

    # The same, the arrays already in the kernel's layouts.
    layouts = kernel.layouts
    ready = {key: np.ascontiguousarray(value.transpose(layouts[key])) if key in layouts else value.copy()
             for key, value in arrays.items() if key not in constants}
    prepared.run_arranged(**ready)
    result = ready[out].transpose(np.argsort(layouts[out])) if out in layouts else ready[out]
    assert relative_error(result, expected[out]) < 1e-4
    # And unprepared, every array arranged (the constants in the prologue's layouts).
    ready = {key: np.ascontiguousarray(value.transpose(layouts[key])) if key in layouts else value.copy()
             for key, value in arrays.items()}
    for name in constants:  # as they were when `expected` was computed
        ready[name] = np.ascontiguousarray((arrays[name] - 1.0).transpose(layouts[name])) if name in layouts \
            else arrays[name] - 1.0
    kernel.run_arranged(**ready)
    result = ready[out].transpose(np.argsort(layouts[out])) if out in layouts else ready[out]
    assert relative_error(result, expected[out]) < 1e-4


def test_a_prepared_kernel_predicts_a_call_after_the_prologue():
    kernel = swauto.compile(EXAMPLES / "conv2d_winograd4.sw", WINOGRAD, constants=["weight"])
    whole = swauto.compile(EXAMPLES / "conv2d_winograd4.sw", WINOGRAD)
    assert kernel.tensors == whole.tensors == ("input", "weight", "output")
    assert kernel.report["prologue_predicted_s"] == kernel.prologue.report["predicted_s"] > 0
    # The filter's channel blocks are the prologue's splits; the call's schedule splits none of them.
    filter_splits = {"fo", "fo2"}
    assert {target for target, _ in kernel.prologue.schedule.splits} == filter_splits
    assert not filter_splits & {target for target, _ in kernel.schedule.splits}
    assert filter_splits <= {target for target, _ in whole.schedule.splits}


def test_choose_compares_calls_after_preparing_the_constants():
    sources = [EXAMPLES / "conv2d_winograd.sw", EXAMPLES / "conv2d_winograd4.sw"]
    kernel = swauto.choose(sources, WINOGRAD, constants=["weight"])
    seconds = {a["operator"]: a["seconds"] for a in kernel.report["alternatives"]}
    assert kernel.report["predicted_s"] == min(seconds.values())
    assert kernel.prologue is not None
    # What is compared is a call after preparing: less than a call that transforms the filter again.
    unprepared = swauto.compile(EXAMPLES / "conv2d_winograd4.sw", WINOGRAD)
    assert seconds["conv2d_winograd4"] < unprepared.report["predicted_s"]


def test_choose_builds_only_the_kernel_it_keeps_and_its_prologue(monkeypatch):
    """`choose` compiles every algorithm to compare them, but generates code (LLVM on the host) only for
    the one it keeps: its kernel and its prologue, which compute the operator called whole."""
    from dataclasses import replace

    from swauto import targets

    real = targets.get("host")
    built = []

    def build(module, candidate):
        built.append(module)
        return real.build(module, candidate)

    monkeypatch.setattr(targets, "get", lambda name: replace(real, build=build))
    sources = [EXAMPLES / "conv2d_winograd.sw", EXAMPLES / "conv2d_winograd4.sw"]
    kernel = swauto.choose(sources, WINOGRAD, target="host", constants=["weight"])
    assert len(kernel.report["alternatives"]) == 2 and kernel.prologue is not None
    assert built == [kernel.module, kernel.prologue.module]
    arrays = _arrays(kernel)
    expected = reference(load(EXAMPLES / f"{kernel.operator.name}.sw", WINOGRAD), arrays)
    kernel(**arrays)
    assert relative_error(arrays["output"], expected["output"]) < 1e-4


@pytest.mark.parametrize(("constants", "message"), [
    (["output"], "it is an output"),
    (["filter"], "it is not one of its tensors"),
    (["U"], "it is local"),
    ("weight", "constants lists input tensors by name"),
])
def test_constants_must_be_inputs(constants, message):
    with pytest.raises(ArgumentError, match=message):
        swauto.compile(EXAMPLES / "conv2d_winograd4.sw", WINOGRAD, constants=constants)


def test_a_prepared_kernel_refuses_its_constants_and_prepare_needs_them_all():
    kernel = swauto.compile(EXAMPLES / "conv2d_winograd4.sw", WINOGRAD, constants=["weight"])
    arrays = _arrays(kernel)
    with pytest.raises(ArgumentError, match="missing array for constant tensor weight"):
        kernel.prepare()
    with pytest.raises(ArgumentError, match="input is not a constant of conv2d_winograd4; its constants are weight"):
        kernel.prepare(weight=arrays["weight"], input=arrays["input"])
    prepared = kernel.prepare(weight=arrays["weight"])
    with pytest.raises(ArgumentError, match="weight is bound by prepare"):
        prepared(**arrays)
    with pytest.raises(ArgumentError, match="no tensor U"):  # the handed tensor is not the user's to give
        prepared(input=arrays["input"], output=arrays["output"], U=np.zeros((6, 6, 6, 5), np.float32))
    with pytest.raises(ArgumentError, match=r"missing array for tensor output \(the kernel takes input, output\)"):
        prepared(input=arrays["input"])  # what a call hands over, not the arrays the prepared kernel holds
    plain = swauto.compile(EXAMPLES / "conv2d_winograd4.sw", WINOGRAD)
    with pytest.raises(ArgumentError, match="its constants are none"):
        plain.prepare(weight=arrays["weight"])


def test_a_prepared_kernel_converts_only_the_arrays_a_call_passes(monkeypatch):
    """The constants were arranged once, at `prepare`: a call in the declared layouts hands the program
    those same arrays (a weight kept [Kr, Kc, Ni, No] is not transposed again at every call)."""
    params = {"B": 1, "Ni": 64, "No": 96, "Ri": 7, "Ci": 7, "Kr": 1, "Kc": 1, "stride": 1, "pad": 0}
    kernel = swauto.compile(EXAMPLES / "conv2d.sw", params, target="host", constants=["weight"])
    assert "weight" in kernel.layouts  # the case: kept in another layout than declared
    arrays = _arrays(kernel)
    prepared = kernel.prepare(weight=arrays.pop("weight"))
    handed = []
    run = kernel.program.run

    def spy(given, threads):
        handed.append(given["weight"])
        return run(given, threads)

    monkeypatch.setattr(kernel.program, "run", spy)
    for _ in range(2):
        prepared(**arrays)
    assert len(handed) == 2 and all(array is prepared._arranged["weight"] for array in handed)
