"""What the benchmarks compile computes what they compare it with."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import swauto
from conftest import EXAMPLES, ROOT
from swauto.api import load
from swauto.reference import reference

sys.path.insert(0, str(ROOT / "benchmarks"))
import host_conv  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)

CONV = {"B": 2, "Ni": 5, "No": 8, "Ri": 6, "Ci": 6}


@pytest.mark.parametrize(("example", "params"), [
    ("conv2d.sw", CONV), ("conv2d_winograd.sw", CONV),
    ("conv2d_depthwise.sw", {"B": 2, "C": 8, "Ri": 6, "Ci": 6})])
def test_the_conv_benchmark_overwrites_the_output_with_the_convolution(example, params):
    """`host_conv.overwriting`: the example's output holds the convolution alone (what PyTorch's conv2d
    gives) whatever it held before the call; the example itself adds into it."""
    kernel = swauto.compile(host_conv.overwriting(example), params, target="host")
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal(kernel.operator.seed.tensor(name).shape, dtype=np.float32)
              for name in ("input", "weight", "output")}
    expected = reference(load(EXAMPLES / example, params), {**arrays, "output": np.zeros_like(arrays["output"])})
    kernel(**arrays)
    assert np.abs(arrays["output"] - expected["output"]).max() <= 1e-5 * np.abs(expected["output"]).max()
    with pytest.raises(ValueError, match="adds into its output"):
        host_conv.overwriting("softmax.sw")
