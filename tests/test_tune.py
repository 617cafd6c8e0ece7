"""Tuning on the simulated SW26010: the `simulate` and `hybrid` tuners, the report's simulated figures,
and `swauto tune` as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import swauto
from conftest import GEMM_SW
from swauto.api import load
from swauto.errors import ArgumentError
from swauto.machine import SUNWAY
from swauto.tuner.simulate import tune
from swauto.tuner.space import explore

SCRIPT = Path(sys.executable).with_name("swauto")
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "swauto.cli"]
PARAMS = {"M": 256, "N": 256, "K": 128}


def test_black_box_finds_the_fastest_and_hybrid_simulates_the_models_top():
    space = explore(load(GEMM_SW, PARAMS), SUNWAY)
    black_box = tune(space)
    simulated = [r.simulated_s for r in black_box.results]
    assert len(simulated) == len(space.legal) and simulated == sorted(simulated)
    hybrid = tune(space, top=3)
    assert sum(r.simulated_s < float("inf") for r in hybrid.results) == 3
    assert hybrid.best.simulated_s >= black_box.best.simulated_s
    model_only = tune(space, top=0)
    assert all(r.simulated_s == float("inf") for r in model_only.results)


def test_sw26010_report_has_simulated_time_gflops_and_peak_fraction():
    kernel = swauto.compile(GEMM_SW, PARAMS, target="sw26010", tuner="simulate")
    report = kernel.report
    assert report["simulated_s"] > 0 and report["predicted_s"] > 0
    assert report["gflops"] == pytest.approx(report["flops"] / report["simulated_s"] / 1e9)
    assert report["peak_fraction"] == pytest.approx(report["gflops"] * 1e9 / SUNWAY.peak_flops)
    model_pick = swauto.compile(GEMM_SW, PARAMS, target="sw26010", tuner="model")
    assert report["simulated_s"] <= model_pick.report["simulated_s"]


def test_simulate_tuner_is_for_the_simulated_target_only():
    with pytest.raises(ArgumentError, match="simulate tuner"):
        swauto.compile(GEMM_SW, PARAMS, target="host", tuner="simulate")


@pytest.mark.parametrize("tuner", ["model", "hybrid", "simulate"])
def test_swauto_tune_prints_a_table_and_plots(tmp_path, tuner):
    plot = tmp_path / "tune.png"
    args = ["tune", str(GEMM_SW), "-D", "M=256", "-D", "N=256", "-D", "K=128", "--tuner", tuner, "--show", "3"]
    if tuner == "hybrid":
        args += ["--plot", str(plot)]
    result = subprocess.run([*COMMAND, *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "predicted ms" in lines[1] and "simulated ms" in lines[1] and "% peak" in lines[1]
    assert [line.split()[0] for line in lines[2:5]] == ["1", "2", "3"]
    assert lines[-1 if tuner != "hybrid" else -2].startswith("tuning")
    assert plot.exists() == (tuner == "hybrid")
