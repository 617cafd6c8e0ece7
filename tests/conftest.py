"""Shared helpers: the example operator, random inputs and the float64 reference."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# Every IR the tests build is checked by the IR verifier after every stage (swauto.ir.verify).
os.environ.setdefault("SWAUTO_VERIFY", "1")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
GEMM_SW = EXAMPLES / "gemm.sw"

# Conv backward-data in scatter form: each (cRo, cCo, cKr, cKc) adds into an output box that overlaps
# its neighbours' (the same as a transposed convolution). Stride 1 fuses image columns into M.
# A sequence loop: each iteration updates s in place with two statements.
STEPS_SW = """
operator steps(T = 4, N = 8) {
  tensor x[T, N]
  tensor s[N]
  compute {
    start: copy(N = N, X = x[0], Z = s)
    for t in 1..T {
      add(N = N, X = s, Y = x[t], Z = s)
      scale(N = N, X = s, Z = s, by = 0.5)
    }
  }
}
"""

SCATTER_SW = """
operator bwd(B = 4, Ni = 8, No = 8, Ro = 5, Co = 6, Kr = 3, Kc = 3, stride = 1) {
  let Rp = (Ro - 1) * stride + Kr
  let Cp = (Co - 1) * stride + Kc
  tensor dY[Ro, Co, No, B]
  tensor weight[Kr, Kc, Ni, No]
  tensor dXp[Rp, Cp, Ni, B]
  compute {
    for cRo in 0..Ro { for cCo in 0..Co { for cKr in 0..Kr { for cKc in 0..Kc {
      gemm(M = B, N = Ni, K = No, A = dY[cRo, cCo, :K, :M], B = weight[cKr, cKc, :N, :K],
           C += dXp[cRo * stride + cKr, cCo * stride + cKc, :N, :M])
    } } } }
  }
  schedule {
    split cCo by {2, 4}
    split cRo by {2}
    fuse cCo.inner into gemm.M
    reorder any
    vectorize gemm over {M, N}
  }
}
"""


def gemm_inputs(m: int, n: int, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "A": rng.standard_normal((m, k), dtype=np.float32),
        "B": rng.standard_normal((k, n), dtype=np.float32),
        "C": rng.standard_normal((m, n), dtype=np.float32),
    }


def gemm_reference(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """C + A B in float64, computed by NumPy directly (independent of swauto's own reference)."""
    return arrays["C"].astype(np.float64) + arrays["A"].astype(np.float64) @ arrays["B"].astype(np.float64)


def assert_golden_stages(op, candidate, name: str, machine=None) -> None:
    """The printed IR of `candidate` lowered for `machine` (the SW26010 by default) after every stage
    equals tests/golden/NAME (rewritten instead when SWAUTO_UPDATE_GOLDEN is set)."""
    import os

    from swauto.ir.printer import format_module
    from swauto.machine import SUNWAY
    from swauto.pipeline import lower

    text = f"# candidate {candidate}\n"
    for stage, module in lower(op, candidate, machine or SUNWAY):
        text += f"=== IR after {stage} ===\n{format_module(module)}"
    golden = Path(__file__).parent / "golden" / name
    if os.environ.get("SWAUTO_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), "printed IR changed; rerun with SWAUTO_UPDATE_GOLDEN=1 if intended"


def sample_legal(op, count: int, seed: int | None, machines=None, where=None) -> list:
    """Up to `count` points of `op`'s space (as `machines[0]` explores it; the SW26010 by default) drawn at
    random with `seed` (the first in the space's order without), among those `where` accepts, each legal
    on every one of `machines`. They are lowered one by one, so the space is never built whole: building
    it lowers and verifies every candidate, which the tests that need every candidate do."""
    import random

    from swauto.errors import Rejected
    from swauto.machine import SUNWAY
    from swauto.pipeline import lower
    from swauto.schedule.space import candidates
    from swauto.tuner.space import vectorized

    machines = machines or (SUNWAY,)
    buffering = (False, True) if machines[0].asynchronous_dma else (False,)
    points = [c for c in candidates(op, buffering, vectorized(op, machines[0])) if where is None or where(c)]
    if seed is not None:
        random.Random(seed).shuffle(points)
    chosen = []
    for candidate in points:
        try:
            for machine in machines:
                lower(op, candidate, machine)
        except Rejected:
            continue
        chosen.append(candidate)
        if len(chosen) == count:
            break
    return chosen


def relative_error(result: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(result - expected).max() / np.abs(expected).max())


@pytest.fixture
def gemm_source() -> Path:
    return GEMM_SW


@pytest.fixture(autouse=True, scope="session")
def _private_kernel_cache(tmp_path_factory: pytest.TempPathFactory):
    """Tests never read or write the user's kernel cache (~/.cache/swauto)."""
    import os

    previous = os.environ.get("SWAUTO_CACHE_DIR")
    os.environ["SWAUTO_CACHE_DIR"] = str(tmp_path_factory.mktemp("swauto-cache"))
    yield
    if previous is None:
        os.environ.pop("SWAUTO_CACHE_DIR", None)
    else:
        os.environ["SWAUTO_CACHE_DIR"] = previous


def use_fresh_cache_dir(folder: Path, monkeypatch) -> Path:
    """Make `folder` the cache folder, holding no kernel: only the session's host calibration, copied in
    where there is one (measuring it again takes seconds, several times a run)."""
    import shutil

    from swauto.backends.host import clear_cache
    from swauto.cache import cache_dir
    from swauto.tuner.host_model import CALIBRATION_FILE

    calibration = cache_dir() / CALIBRATION_FILE
    folder.mkdir(parents=True, exist_ok=True)
    if calibration.is_file():
        shutil.copyfile(calibration, folder / CALIBRATION_FILE)
    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(folder))
    clear_cache()
    return folder


@pytest.fixture
def empty_cache_dir(tmp_path, monkeypatch):
    """A test of its own cache folder (no kernel in it: `use_fresh_cache_dir`), and no kernel left in
    memory before or after."""
    from swauto.backends.host import clear_cache

    yield use_fresh_cache_dir(tmp_path, monkeypatch)
    clear_cache()
