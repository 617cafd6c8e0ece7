"""The Python API: compile, call, report; wrong arrays and arguments raise ArgumentError."""

from __future__ import annotations

import numpy as np
import pytest

import swauto
from conftest import gemm_inputs, gemm_reference, relative_error
from swauto.errors import ArgumentError, ParameterError, ScheduleError, SwautoError

PARAMS = {"M": 256, "N": 128, "K": 64}


@pytest.fixture(scope="module", params=["host", "sw26010"])
def kernel(request):
    from conftest import GEMM_SW

    return swauto.compile(GEMM_SW, PARAMS, target=request.param)


def test_kernel_computes_and_reports(kernel):
    arrays = gemm_inputs(256, 128, 64)
    expected = gemm_reference(arrays)
    kernel(**arrays)
    assert relative_error(arrays["C"], expected) <= 1e-5
    report = kernel.report
    assert report["candidate"] == kernel.schedule.id
    assert report["flops"] == 2 * 256 * 128 * 64
    assert report["predicted_s"] > 0
    assert "gemm(M=" in kernel.ir
    assert kernel.code


def test_compile_accepts_text_and_a_chosen_schedule(gemm_source):
    text = gemm_source.read_text()
    candidates = swauto.schedules(text, PARAMS)
    chosen = candidates[-1]
    for schedule in (chosen, chosen.id, chosen.to_json()):
        kernel = swauto.compile(text, PARAMS, target="sw26010", schedule=schedule)
        assert kernel.schedule == chosen


def test_sw26010_report_gains_simulated_counters(gemm_source):
    kernel = swauto.compile(gemm_source, PARAMS, target="sw26010")
    kernel(**gemm_inputs(256, 128, 64))
    assert kernel.report["simulated"]["flops"] == 2 * 256 * 128 * 64
    assert kernel.report["simulated"]["dma_transactions"] > 0


def _bad_calls():
    good = gemm_inputs(256, 128, 64)
    yield {k: v for k, v in good.items() if k != "B"}, "missing array for tensor B"
    yield {**good, "D": good["A"]}, "gemm has no tensor D; it takes A, B, C"
    yield {**good, "A": good["A"].astype(np.float64)}, "tensor A is float64; this kernel takes float32"
    yield {**good, "A": good["A"][:128]}, r"tensor A has shape \(128, 64\); expected \(256, 64\)"
    yield {**good, "A": np.asfortranarray(good["A"])}, "tensor A is not C-contiguous"
    yield {**good, "B": good["B"].tolist()}, "tensor B must be a NumPy array or an array that speaks DLPack, got list"
    read_only = good["C"].copy()
    read_only.flags.writeable = False
    yield {**good, "C": read_only}, "output tensor C is read-only"


@pytest.mark.parametrize(("arrays", "message"), list(_bad_calls()))
def test_wrong_arrays_raise_argument_error(kernel, arrays, message):
    with pytest.raises(ArgumentError, match=message):
        kernel(**arrays)


class _Foreign:
    """An array of another library, seen only through the DLPack protocol (it lends its memory)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_arrays_that_speak_dlpack_are_used_in_place(kernel):
    arrays = gemm_inputs(256, 128, 64)
    expected = gemm_reference(arrays)
    kernel(**{name: _Foreign(array) for name, array in arrays.items()})
    assert relative_error(arrays["C"], expected) <= 1e-5  # the output was written into the lender's memory


def test_pytorch_tensors_are_used_in_place(kernel):
    torch = pytest.importorskip("torch")
    arrays = {name: torch.from_numpy(array) for name, array in gemm_inputs(256, 128, 64).items()}
    expected = gemm_reference({name: tensor.numpy() for name, tensor in arrays.items()})
    kernel(**arrays)
    assert relative_error(arrays["C"].numpy(), expected) <= 1e-5


@pytest.mark.parametrize("aliasing", ["the same array", "overlapping views"])
def test_output_aliasing_an_input_is_refused(gemm_source, aliasing):
    """Arrays that each own their memory are told apart by identity alone; views are compared."""
    kernel = swauto.compile(gemm_source.read_text().replace("{128, 256, 512}", "{128}"),
                            {"M": 128, "N": 128, "K": 128}, target="sw26010")
    shared = gemm_inputs(128, 128, 128)
    if aliasing == "the same array":
        a, c = shared["C"], shared["C"]
    else:
        rows = np.zeros((192, 128), np.float32)
        a, c = rows[:128], rows[64:]
    with pytest.raises(ArgumentError, match="output C shares memory with A"):
        kernel(A=a, B=shared["B"], C=c)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "gpu"}, "unknown target 'gpu'; choose one of host, sw26010"),
        ({"tuner": "random"}, "unknown tuner 'random'"),
        ({"threads": 0}, "threads must be a positive integer"),
    ],
)
def test_wrong_compile_arguments(gemm_source, kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        swauto.compile(gemm_source, PARAMS, **kwargs)


def test_missing_file_is_a_swauto_error(tmp_path):
    with pytest.raises(SwautoError, match="cannot read"):
        swauto.compile(tmp_path / "nope.sw")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"params": {"M": "512"}}, ParameterError, "parameter M must be an integer, got '512' \\(str\\)"),
        ({"params": {"M": 512.0}}, ParameterError, "parameter M must be an integer, got 512.0 \\(float\\)"),
        ({"params": {"M": True}}, ParameterError, "parameter M must be an integer, got True \\(bool\\)"),
        ({"params": {"M": 2**40}}, ParameterError, "parameter M must be at most 2147483647"),
        ({"params": [1]}, ParameterError, "the parameters must be a mapping of names to integers"),
        ({"params": {1: 2}}, ParameterError, "the parameters must be a mapping of names to integers"),
        ({"target": 3}, ArgumentError, "unknown target 3; choose one of host, sw26010"),
        ({"target": ["host"]}, ArgumentError, "unknown target \\['host'\\]"),
        ({"tuner": None}, ArgumentError, "unknown tuner None"),
        ({"schedule": 42}, ArgumentError, "schedule must be a Candidate, its id or its JSON form, got int"),
        ({"schedule": {"splits": {}}}, ScheduleError, "a candidate schedule needs the field 'order'"),
        ({"threads": "2"}, ArgumentError, "threads must be an integer, got '2' \\(str\\)"),
        ({"threads": 2.0}, ArgumentError, "threads must be an integer, got 2.0 \\(float\\)"),
        ({"threads": 9999}, ArgumentError, "threads must be at most .* \\(the cores this process may run on"),
        ({"max_candidates": 0}, ArgumentError, "max_candidates must be a positive integer, got 0"),
        ({"max_candidates": "5"}, ArgumentError, "max_candidates must be an integer"),
        ({"layouts": [["M", "K"]]}, ArgumentError, "layouts maps tensor names to their axes in memory order"),
        ({"layouts": {"D": ["M", "N"]}}, ArgumentError, "gemm has no tensor D to lay out; its tensors are A, B, C"),
        ({"layouts": {"A": ["K", "M"]}}, ArgumentError, "A cannot be laid out as \\['K', 'M'\\]: gemm's schedule keeps "
                                                        "it as \\[M, K\\]"),
        ({"layouts": {"A": 5}}, ArgumentError, "A cannot be laid out as 5"),
        ({"layouts": {"A": [True, False]}}, ArgumentError, "A cannot be laid out as \\[True, False\\]"),
    ],
)
def test_wrong_python_types_raise_a_swauto_error(gemm_source, kwargs, error, message):
    arguments = {"params": PARAMS, "target": "sw26010", **kwargs}
    with pytest.raises(error, match=message):
        swauto.compile(gemm_source, **arguments)


def test_a_source_that_is_neither_a_path_nor_text():
    for source in (42, None, b"operator"):
        with pytest.raises(ArgumentError, match="source must be a path or the text of a .sw file"):
            swauto.compile(source)
        with pytest.raises(ArgumentError, match="source must be a path or the text of a .sw file"):
            swauto.schedules(source)


def test_schedules_checks_its_arguments_too(gemm_source):
    with pytest.raises(ArgumentError, match="unknown target 7"):
        swauto.schedules(gemm_source, PARAMS, target=7)
    with pytest.raises(ParameterError, match="parameter K must be an integer"):
        swauto.schedules(gemm_source, {**PARAMS, "K": 64.5})
    with pytest.raises(ArgumentError, match="max_candidates must be an integer, got None"):
        swauto.schedules(gemm_source, PARAMS, max_candidates=None)


def test_every_package_is_installed():
    """pyproject.toml lists every package of the source tree (a missing one breaks a clean install only)."""
    import tomllib

    from conftest import ROOT

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "swauto").rglob("__init__.py")}
    found |= {"swauto." + ".".join(path.parent.relative_to(ROOT).parts) for folder in ("grammar", "backends")
              for path in (ROOT / folder).rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


CONV_ALGORITHMS = ("conv2d.sw", "conv2d_explicit.sw", "conv2d_winograd.sw")


def test_choose_keeps_the_algorithm_the_model_predicts_fastest_and_says_why(monkeypatch):
    monkeypatch.setenv("SWAUTO_VERIFY", "0")  # the choice under test, not the IR (test_operators verifies it)
    from conftest import EXAMPLES

    params = {"B": 2, "Ni": 8, "No": 8, "Ri": 6, "Ci": 6}
    kernel = swauto.choose([EXAMPLES / name for name in CONV_ALGORITHMS], params, target="sw26010")
    alternatives = kernel.report["alternatives"]
    assert [a["operator"] for a in alternatives] == ["conv2d", "conv2d_explicit", "conv2d_winograd"]
    fastest = min(alternatives, key=lambda a: a["predicted_s"])
    assert kernel.operator.name == fastest["operator"] and kernel.report["predicted_s"] == fastest["predicted_s"]
    assert kernel.report["why"].startswith(f"{fastest['operator']} is predicted fastest at")
    strided = swauto.choose([EXAMPLES / name for name in CONV_ALGORITHMS], {**params, "stride": 2}, target="sw26010")
    skipped = [a for a in strided.report["alternatives"] if not a["applies"]]
    assert [a["operator"] for a in skipped] == ["conv2d_winograd"] and "stride == 1" in skipped[0]["reason"]


def test_choose_with_a_tuner_that_runs_candidates_keeps_the_algorithm_that_runs_fastest(monkeypatch):
    """With a tuner that runs candidates, each algorithm's pick is run again where that tuner runs them
    (here the SW26010's timed simulator) and the fastest is kept, whatever the model predicted (the host
    model once chose Winograd at 1.89 ms predicted against 1.96 where it ran 1.26x slower). What is
    checked is the choice: the IR of the three whole spaces is not verified again (two thirds of the
    test's time; test_operators verifies every candidate of these examples)."""
    monkeypatch.setenv("SWAUTO_VERIFY", "0")
    from conftest import EXAMPLES
    from swauto.backends.sw26010.timing import time_module
    from swauto.machine import SUNWAY

    params = {"B": 2, "Ni": 8, "No": 8, "Ri": 6, "Ci": 6}
    kernel = swauto.choose([EXAMPLES / name for name in CONV_ALGORITHMS], params, target="sw26010", tuner="hybrid",
                            max_candidates=200)
    alternatives = [a for a in kernel.report["alternatives"] if a["applies"]]
    fastest = min(alternatives, key=lambda a: a["seconds"])
    assert kernel.operator.name == fastest["operator"]
    assert fastest["seconds"] == time_module(kernel.module, SUNWAY).seconds  # the simulator's, not the model's
    assert kernel.report["why"].startswith(f"{fastest['operator']} runs fastest on the simulated sw26010 at")


def test_choose_refuses_sources_of_different_operators(gemm_source):
    renamed = gemm_source.read_text().replace("C[", "D[").replace("C += C", "C += D")
    with pytest.raises(ArgumentError, match=r"gemm takes A\[128, 64\], B\[64, 128\], D\[128, 128\] where gemm takes "
                                            r"A\[128, 64\], B\[64, 128\], C\[128, 128\]"):
        swauto.choose([gemm_source, renamed], {"M": 128, "N": 128, "K": 64}, target="sw26010")


def test_pinned_layouts_narrow_the_space_and_are_kept(empty_cache_dir):
    """`layouts` pins tensors to one of the layouts their schedule allows, by axis name or index: the
    kernel keeps them so, computes the same, and is tuned (and remembered) apart from the unpinned one."""
    from conftest import EXAMPLES
    from swauto.api import load
    from swauto.reference import reference

    source, params = EXAMPLES / "conv2d.sw", {"B": 3, "Ni": 5, "No": 7, "Ri": 6, "Ci": 5}
    free = {choice.tensor: choice.permutations for choice in load(source, params).space.layouts}
    assert free["input"] == ((0, 1, 2, 3), (0, 1, 3, 2))
    for layout in (["Ri", "Ci", "B", "Ni"], [0, 1, 2, 3], "Ri, Ci, B, Ni"):
        space = load(source, params, {"input": layout}).space
        pinned = {choice.tensor: choice.permutations for choice in space.layouts}
        assert pinned == {**free, "input": ((0, 1, 3, 2) if "B" in layout else (0, 1, 2, 3),)}
    channels_last = {"input": ["Ri", "Ci", "B", "Ni"], "output": ["Ro", "Co", "B", "No"]}
    swauto.compile(source, params, target="sw26010")
    assert not swauto.compile(source, params, target="sw26010", layouts=channels_last).report["from_tuning_log"]
    for target in ("host", "sw26010"):
        kernel = swauto.compile(source, params, target=target, layouts=channels_last)
        assert kernel.layouts["input"] == kernel.layouts["output"] == (0, 1, 3, 2)
        assert kernel.report["from_tuning_log"] == (target == "sw26010")  # a request of its own, remembered
        rng = np.random.default_rng(1)
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in kernel.operator.seed.tensors}
        expected = reference(kernel.operator, arrays)["output"]
        kernel(**arrays)
        assert relative_error(arrays["output"], expected) < 1e-5
