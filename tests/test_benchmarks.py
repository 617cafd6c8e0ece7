"""What the benchmarks compile computes what they compare it with."""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import pytest

import swauto
from conftest import EXAMPLES, ROOT
from swauto.api import load
from swauto.reference import reference

CONV = {"B": 2, "Ni": 5, "No": 8, "Ri": 6, "Ci": 6}


@pytest.fixture(scope="module")
def host_conv() -> ModuleType:
    """benchmarks/host_conv.py, imported with benchmarks/ on the path only meanwhile (a folder of scripts,
    not a package: its coverage.py would hide the coverage package from the rest of the session)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        return importlib.import_module("host_conv")


@pytest.mark.parametrize(("example", "params"), [
    ("conv2d.sw", CONV), ("conv2d_winograd.sw", CONV),
    ("conv2d_depthwise.sw", {"B": 2, "C": 8, "Ri": 6, "Ci": 6})])
def test_the_conv_benchmark_overwrites_the_output_with_the_convolution(host_conv, example, params):
    """`host_conv.overwriting`: the example's output holds the convolution alone (what PyTorch's conv2d
    gives) whatever it held before the call; the example itself adds into it."""
    kernel = swauto.compile(host_conv.overwriting(example), params, target="host")
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal(kernel.operator.seed.tensor(name).shape, dtype=np.float32)
              for name in ("input", "weight", "output")}
    expected = reference(load(EXAMPLES / example, params), {**arrays, "output": np.zeros_like(arrays["output"])})
    kernel(**arrays)
    assert np.abs(arrays["output"] - expected["output"]).max() <= 1e-5 * np.abs(expected["output"]).max()


def test_an_example_that_adds_into_nothing_is_refused(host_conv):
    with pytest.raises(ValueError, match="adds into its output"):
        host_conv.overwriting("softmax.sw")
