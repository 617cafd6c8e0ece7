"""The `swauto` command, run as a user runs it: exit codes, messages, --dump-ir, -o."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import GEMM_SW

# The installed console script when there is one (as a user runs it), else the module.
SCRIPT = Path(sys.executable).with_name("swauto")
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "swauto.cli"]


def swauto(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True)


SIZES = ["-D", "M=256", "-D", "N=128", "-D", "K=64"]


def test_compile_prints_the_choice_and_writes_code(tmp_path):
    out = tmp_path / "gemm.c"
    result = swauto("compile", str(GEMM_SW), *SIZES, "--target", "sw26010", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "candidate" in result.stdout and "predicted" in result.stdout
    assert "gemm_op(" in out.read_text()


def test_dump_ir_shows_every_pass():
    result = swauto("compile", str(GEMM_SW), *SIZES, "--target", "sw26010", "--dump-ir")
    assert result.returncode == 0, result.stderr
    stages = [line for line in result.stdout.splitlines() if line.startswith("=== IR after")]
    passes = ["seed", "schedule", "peel_boundaries", "pad_primitive", "infer_dma", "hoist_dma"]
    expected = [f"=== IR after {s} ===" for s in passes]
    assert stages[: len(passes)] == expected and stages[-1] == "=== IR after plan_local_memory ==="
    assert "dma get" in result.stdout


def test_schedules_counts_and_lists():
    result = swauto("schedules", str(GEMM_SW), *SIZES)
    assert result.returncode == 0, result.stderr
    assert "864 candidates" in result.stdout
    assert "rejected" in result.stdout and "tile larger than its dimension" in result.stdout


def test_run_compares_with_reference_on_both_targets():
    for target in ("sw26010", "host"):
        result = swauto("run", str(GEMM_SW), *SIZES, "--target", target, "--repeat", "2")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "relative to the NumPy float64 reference: ok" in result.stdout
        assert "GFLOPS" in result.stdout


def test_run_a_convolution_with_padding_and_stride():
    conv = str(GEMM_SW.parent / "conv2d.sw")
    for target in ("sw26010", "host"):
        result = swauto("run", conv, "-D", "B=2", "-D", "Ri=9", "-D", "Ci=9", "-D", "stride=2", "-D", "pad=2",
                        "--target", target, "--repeat", "1")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "relative to the NumPy float64 reference: ok" in result.stdout


def test_syntax_error_exits_2_with_caret(tmp_path):
    bad = tmp_path / "bad.sw"
    bad.write_text("operator g(M) {\n  tensor A[M\n}\n")
    result = swauto("compile", str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"swauto: error: {bad}:3:1: unexpected '}}'")
    assert lines[2].strip() == "^"


def test_user_errors_exit_2_without_traceback():
    for args, message in [
        (["compile", str(GEMM_SW), "-D", "M=-1"], "parameter M must be a non-negative integer"),
        (["compile", str(GEMM_SW), "-D", "M=0"], "axis of tensor A is 0 for these parameters"),
        (["compile", str(GEMM_SW), "-D", "Q=4"], "unknown parameter Q"),
        (["compile", str(GEMM_SW), "-D", "M=64"], "M = 64 is smaller than every tile size"),
        (["compile", "missing.sw"], "cannot read missing.sw"),
        (["compile", str(GEMM_SW), "--schedule", "00000000"], "no legal candidate has id 00000000"),
        (["compile", str(GEMM_SW), "-D", "M=x"], "the value of M must be an integer"),
    ]:
        result = swauto(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
