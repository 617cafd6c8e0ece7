"""The `swauto` command, run as a user runs it: exit codes, messages, --dump-ir, -o."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import GEMM_SW

# The installed console script when there is one (as a user runs it), else the module.
SCRIPT = Path(sys.executable).with_name("swauto")
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "swauto.cli"]


def swauto(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True)


def swauto_in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                      *args: str) -> subprocess.CompletedProcess:
    """`swauto` run by the `main` the console script calls, in this process (a second apiece less than
    starting Python again): its exit code, standard output and error. The other tests run the script."""
    from swauto import cli

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # `main` sets its own
    try:
        code = cli.main(list(args))
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, captured.out, captured.err)


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
    # N = 128 and K = 64 fit one tile: fewer loop orders. With M in one tile too there is no loop left,
    # so its two double-buffered candidates have nothing to prefetch.
    assert "20 candidates, 18 legal" in result.stdout
    assert "rejected      2  no transfer inside" in result.stdout


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
        (["compile", "missing.sw"], "cannot read missing.sw"),
        (["compile", str(GEMM_SW), "--schedule", "00000000"], "no legal candidate has id 00000000"),
        (["compile", str(GEMM_SW), "-D", "M=x"], "the value of M must be an integer"),
    ]:
        result = swauto(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def _nine_loops(tmp_path: Path) -> Path:
    """The issue's 250-byte file: 9 loops under `reorder any` (9! orders)."""
    body = "gemm(M = M, N = N, K = K, A = A, B = B, C += C)"
    for level in range(9):
        body = f"for l{level} in 0..2 {{ {body} }}"
    path = tmp_path / "nine.sw"
    path.write_text(f"operator g(M = 64, N = 64, K = 64) {{ tensor A[M, K] tensor B[K, N] tensor C[M, N] "
                    f"compute {{ {body} }} schedule {{ reorder any }} }}\n")
    return path


def test_more_user_errors_exit_2_with_one_sentence(tmp_path, capsys, monkeypatch):
    latin1 = tmp_path / "latin1.sw"
    latin1.write_bytes(b"operator g(M = 4) {\n  # caf\xe9\n}\n")
    gemm = str(GEMM_SW)
    sw = ["--target", "sw26010"]
    for args, message in [
        (["compile", str(latin1)], f"{latin1}:2:8: the file is not UTF-8 text: 0xe9 at byte offset 27"),
        (["compile", gemm, *SIZES, *sw, "-o", str(tmp_path)], f"-o {tmp_path} is a directory"),
        (["compile", gemm, *SIZES, *sw, "-o", str(tmp_path / "no" / "x.c")], f"{tmp_path / 'no'} does not exist"),
        (["compile", gemm, *SIZES, *sw, "-o", f"{gemm}/x.c"], f"{gemm} is not a folder"),
        (["run", gemm, *SIZES, *sw, "--seed", "-1"], "argument --seed: the value must be a non-negative integer"),
        (["tune", gemm, *SIZES, "--plot", str(tmp_path / "no" / "p.png")], f"{tmp_path / 'no'} does not exist"),
        (["tune", gemm, *SIZES, "--plot", str(tmp_path / "p.xyz")], "matplotlib writes files ending in"),
        (["compile", gemm, "-D", f"N={2**63}", *sw], "parameter N must be at most 2147483647, got 9223372036854775808"),
        (["run", gemm, "-D", "M=1000000", "-D", "N=1000000", "-D", "K=1000000", *sw],
         "`run` would allocate 40978.2 GiB (11175.9 GiB of float32 tensors"),
        (["compile", gemm, *SIZES, "--threads", "9999"], "threads must be at most"),
        (["compile", gemm, *SIZES, "--threads", "0"], "argument --threads: the value must be a positive integer"),
        (["compile", gemm, "-D", "M=256", "-D", "M=512"], "parameter M is given twice (-D M=256 and -D M=512)"),
        (["compile", gemm, "-D", "M=1_28"], "the value of M must be an integer written in decimal digits, got '1_28'"),
        (["compile", gemm, "-D", "M= 128"], "the value of M must be an integer written in decimal digits"),
        (["run", gemm, *SIZES, "--repeat", "0"], "argument --repeat: the value must be a positive integer, got 0"),
        (["tune", gemm, *SIZES, "--top", "0"], "argument --top: the value must be a positive integer, got 0"),
        (["tune", gemm, *SIZES, "--show", "0"], "argument --show: the value must be a positive integer, got 0"),
        (["tune", gemm, *SIZES, "--show", "-2"], "argument --show: the value must be a positive integer, got -2"),
        (["schedules", str(_nine_loops(tmp_path))], "has 1,451,520 candidates (9! = 362,880 loop orders"),
        (["schedules", gemm, *SIZES, "--max-candidates", "19"], "more than the bound of 19; narrow"),
        (["schedules", gemm, *SIZES, "--max-candidates", "0"], "argument --max-candidates: the value must be a"),
        (["compile", gemm, *SIZES, "--layout", "C=N,M"], "C cannot be laid out as ['N', 'M']: gemm's schedule"),
        (["compile", gemm, *SIZES, "--layout", "C"], "argument --layout: expected TENSOR=AXIS,AXIS,..., got 'C'"),
        (["compile", gemm, *SIZES, "--layout", "C=M,N", "--layout", "C=M,N"], "tensor C is laid out twice"),
        (["compile", gemm, *SIZES, "--constant", "C"], "gemm cannot take 'C' as a constant: it is an output"),
    ]:
        result = swauto_in_process(capsys, monkeypatch, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_the_bound_can_be_raised_on_the_command_line():
    result = swauto("schedules", str(GEMM_SW), *SIZES, "--max-candidates", "20")
    assert result.returncode == 0, result.stderr
    assert "20 candidates" in result.stdout


def test_the_command_says_it_measures_the_host_before_it_does(tmp_path, monkeypatch, capsys):
    """Calibration takes up to about a minute without other output; the first host compile on a machine runs it too."""
    from test_host_model import quiet_machine

    from swauto import cli
    from swauto.tuner import host_model

    said: list[str] = []

    def calibrate(cpu: str) -> host_model.Machine:
        said.append(capsys.readouterr().err)  # what was on stderr when measuring began
        return quiet_machine(cpu)

    monkeypatch.setattr(host_model, "calibrate", calibrate)
    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path))
    assert cli.main(["calibrate"]) == 0
    assert len(said) == 1 and said[0].startswith("swauto: measuring this machine for the host model")
    assert cli.main(["calibrate"]) == 0  # said once per calibration, not once per handler added
    assert said[1].count("measuring this machine") == 1


def test_calibrate_prints_what_was_measured(monkeypatch, capsys):
    from dataclasses import dataclass

    from swauto import cli

    @dataclass(frozen=True)
    class Measured:
        flops_per_s: float
        accumulators: int

    calls = []

    def recalibrate(folder=None):
        calls.append(folder)
        return Measured(1.25e11, 8)

    monkeypatch.setattr("swauto.tuner.host_model.recalibrate", recalibrate, raising=False)
    assert cli.main(["calibrate"]) == 0
    out = capsys.readouterr().out
    assert calls == [None]
    assert "flops_per_s" in out and "1.25e+11" in out and "accumulators" in out and " 8" in out


@pytest.mark.parametrize("name", ["fc_bias_relu", "softmax", "maxpool", "conv2d_nchw"])
def test_run_new_examples(name):
    """`swauto run` on examples of several statements and primitives (random inputs for the arguments,
    not the local tensors), compared with the reference (the larger spaces are tested in-process)."""
    from test_operators import OPERATORS

    sizes = [arg for key, value in OPERATORS[name].items() for arg in ("-D", f"{key}={value}")]
    result = swauto("run", str(GEMM_SW.parent / f"{name}.sw"), *sizes, "--target", "sw26010")
    assert result.returncode == 0, result.stderr
    assert "relative to the NumPy float64 reference: ok" in result.stdout


def test_choose_lists_the_algorithms_and_says_which_and_why():
    convs = [str(GEMM_SW.parent / name) for name in ("conv2d.sw", "conv2d_explicit.sw", "conv2d_winograd.sw")]
    sizes = ["-D", "B=2", "-D", "Ni=8", "-D", "No=8", "-D", "Ri=6", "-D", "Ci=6", "-D", "stride=2"]
    result = swauto("choose", *convs, *sizes, "--target", "sw26010")
    assert result.returncode == 0, result.stderr
    assert "does not apply: operator conv2d_winograd is written for `require stride == 1`" in result.stdout
    assert "chosen     conv2d" in result.stdout and "is predicted fastest at" in result.stdout
    refused = swauto("choose", *convs, *sizes, "--schedule", "12345678")
    assert refused.returncode == 2 and "--schedule names one candidate of one file" in refused.stderr


def test_a_layout_is_pinned_from_the_command_line():
    conv = str(GEMM_SW.parent / "conv2d.sw")
    sizes = ["-D", "B=4", "-D", "Ni=8", "-D", "No=8", "-D", "Ri=6", "-D", "Ci=6"]
    result = swauto("run", conv, *sizes, "--target", "sw26010", "--layout", "input=Ri,Ci,B,Ni")
    assert result.returncode == 0, result.stderr
    assert "input layout [0, 1, 3, 2]" in result.stdout and ": ok" in result.stdout


def test_run_prepares_the_constants_once_and_checks_the_result(capsys, monkeypatch):
    winograd = str(GEMM_SW.parent / "conv2d_winograd4.sw")
    result = swauto_in_process(capsys, monkeypatch, "run", winograd, "-D", "B=2", "-D", "Ni=5", "-D", "No=6",
                               "-D", "Ri=7", "-D", "Ci=5", "--target", "host", "--repeat", "1", "--constant", "weight")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "prologue" in result.stdout and "once for the constants" in result.stdout
    assert "relative to the NumPy float64 reference: ok" in result.stdout
