"""What the benchmarks compile computes what they compare it with."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

import swauto
from conftest import EXAMPLES, ROOT
from swauto.api import load
from swauto.reference import reference

CONV = {"B": 2, "Ni": 5, "No": 8, "Ri": 6, "Ci": 6}


def _benchmark(name: str) -> ModuleType:
    """benchmarks/`name`.py, imported with benchmarks/ on the path only meanwhile (a folder of scripts,
    not a package: its coverage.py would hide the coverage package from the rest of the session)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        return importlib.import_module(name)


@pytest.fixture(scope="module")
def host_conv() -> ModuleType:
    return _benchmark("host_conv")


@pytest.fixture(scope="module")
def host_gemm() -> ModuleType:
    return _benchmark("host_gemm")


def test_a_benchmark_runs_again_where_a_busy_core_held_its_probe_down(monkeypatch):
    """`common.probed_run` (the GEMM and conv benchmarks'): a run whose probe read below `BUSY_FRACTION` of
    the peak calibration measured on its cores is run again, up to `RUNS` in all, and the row of the
    highest probe kept with how many runs it took; a quiet first run is the only one."""
    common = _benchmark("common")
    monkeypatch.setattr("swauto.tuner.host_model.machine", lambda: SimpleNamespace(peak_flops=250e9))
    probes = iter([240.0, 470.0, 480.0])  # two cores: 500 GFLOPS calibrated
    assert common.probed_run(lambda: {"peak_gflops": next(probes)}, 2) == {"peak_gflops": 470.0, "runs": 2}
    assert common.probed_run(lambda: {"peak_gflops": 240.0}, 2)["runs"] == common.RUNS
    assert common.probed_run(lambda: {"peak_gflops": 480.0}, 2)["runs"] == 1


def test_the_gemm_benchmark_computes_c_as_its_peers_do(host_gemm):
    """`host_gemm.gemm_source` overwrites C with A B, as NumPy's and PyTorch's `out=` do, whatever C held."""
    params = {"M": 40, "N": 24, "K": 56}
    kernel = swauto.compile(host_gemm.gemm_source(40, 24, 56), params, target="host")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 56), dtype=np.float32), rng.standard_normal((56, 24), dtype=np.float32)
    c = np.full((40, 24), 7.0, np.float32)
    kernel(A=a, B=b, C=c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


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


@pytest.fixture(scope="module")
def profile_host() -> ModuleType:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        return importlib.import_module("profile_host")


_OBJDUMP = """
kernel.o:     file format elf64-x86-64

Disassembly of section .ltext:

0000000000000000 <swauto_k_before>:
   0:\tret
0000000000000010 <swauto_k_loop>:
  10:\txor    %eax,%eax
  14:\tvmovups (%rax),%zmm0
  1a:\tvfmadd231ps %zmm0,%zmm1,%zmm2
  20:\tinc    %rax
  24:\tjne    14 <swauto_k_loop+0x4>
  2a:\tdec    %rcx
  2e:\tjne    10 <swauto_k_loop>
  34:\tjmp    40 <swauto_k_loop+0x30>
  40:\tret
"""


def test_the_profiler_finds_the_innermost_loops_of_the_machine_code(profile_host):
    """A backward jump's range holding no other is an innermost loop; a forward jump is none."""
    functions = profile_host.parse_objdump(_OBJDUMP)
    assert [i.address for i in functions["swauto_k_loop"]] == [0x10, 0x14, 0x1A, 0x20, 0x24, 0x2A, 0x2E, 0x34, 0x40]
    assert profile_host.innermost_loops(functions) == [profile_host.Loop("swauto_k_loop", 0x14, 0x24)]


def test_the_profiler_maps_samples_to_the_kernels_loops_and_the_runtime(profile_host):
    """Samples inside the loaded code count by instruction and loop (the object loaded at an offset);
    the others by library: the OpenMP runtime, libc by symbol, Python."""
    offset = 0x7F0000001000
    lines = [f"7 12.5: {offset + 0x1A:x} [unknown] ([JIT] tid 7)"] * 6 + \
            [f"7 12.5: {offset + 0x2A:x} [unknown] ([JIT] tid 7)"] * 2 + \
            ["9 12.6: 7f00aa gomp_barrier_wait_end (/usr/lib/libgomp.so.1.0.0)",
             "7 12.6: 7f00bb __memmove_avx512_unaligned_erms+0x12 (/usr/lib/libc.so.6)"]
    samples = profile_host.parse_perf_script("\n".join(lines))
    assert len(samples) == 10 and samples[0].time == 12.5 and samples[-1].symbol.startswith("__memmove")
    assert [s.thread for s in samples].count(9) == 1
    report = profile_host.report(samples, profile_host.parse_objdump(_OBJDUMP),
                                 {"swauto_k_before": offset, "swauto_k_loop": offset + 0x10}, top=1)
    assert report[0] == " 80.0%  generated code"
    assert "OpenMP runtime" in report[1] and "libc __memmove_avx512_unaligned_erms" in report[2]
    assert report[3:5] == ["        thread 7 (calling): generated code 89%, libc __memmove_avx512_unaligned_erms 11%",
                           "        thread 9: OpenMP runtime 100%"]
    loop = report.index(" 60.0%  swauto_k_loop +0x14..0x24 (4 instructions)")
    assert report[loop + 1].split() == ["60.0%", "+0x1a", "vfmadd231ps", "%zmm0,%zmm1,%zmm2"]
    assert report[-2:] == [" 20.0%  generated code outside its innermost loops", "           20.0%  +0x2a  dec    %rcx"]


@pytest.mark.skipif(shutil.which("perf") is None or shutil.which("objdump") is None, reason="needs perf and objdump")
def test_the_profiler_profiles_a_kernel_under_perf():
    """The whole tool on a small GEMM: its samples fall in the generated code, mostly in the micro-kernel."""
    from swauto.tuner.host_model import machine

    machine()  # calibrated in this session's cache folder, which the child shares, before the child needs it
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_host.py"), str(EXAMPLES / "gemm.sw"),
                             "-D", "M=256", "-D", "N=256", "-D", "K=256", "--seconds", "1"],
                            capture_output=True, text=True, timeout=120, check=False)
    if "perf record failed" in result.stderr:
        pytest.skip("perf may not sample here: " + result.stderr.strip())
    assert result.returncode == 0, result.stderr
    shares = {line.split("%", 1)[1].strip(): float(line.split("%")[0]) for line in result.stdout.splitlines()
              if line.strip().endswith("generated code")}
    assert shares["generated code"] > 50
    assert "innermost loops of the generated code" in result.stdout
