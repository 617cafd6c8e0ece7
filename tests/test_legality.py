"""Legality must be proven (issue 14, part 1): every candidate is right on both targets, and none hangs.

Two silent failures motivated these tests: a host kernel that never returned (a view's pointer set in
one thread phase's function and used in another's) and double buffering that prefetched an output tile
an earlier, still pending write overlapped (scatter-form conv backward-data on the SW26010). The seeds
here have overlapping outputs (scatter backward-data, which is also a transposed convolution) and views
hoisted out of the parallel nest (the issue's valid-padding convolution, a scaled-down VGG16 conv5_1),
plus a GEMM no tile divides. Each candidate is compiled with `swauto.compile(..., schedule=candidate)`,
run on random inputs (outputs start random too: a kernel accumulates) and compared with
`swauto.reference.reference`, the seed run in float64 without any schedule: the largest error is at
most 1e-4 of the largest reference element.

Every call runs in a forked child with a timeout (tests/isolation.py): a hang fails the test, naming the
candidate, instead of stalling CI. A failure names the seed, sizes, target, threads, candidate id and JSON.

Bounded by default (under two minutes on two cores, a quarter of it the host model's calibration when
run alone): every candidate at the smallest shape of each seed (of the SW26010's overlapping-output spaces,
every double-buffered one and a sample of the others), a deterministic sample at a second one,
one micro-kernel per host lowering (candidates that differ only in the micro-kernel share a lowering; the
micro-kernels alternate). `SWAUTO_EXHAUSTIVE=1` runs every candidate, every micro-kernel and three shapes
(many minutes); `SWAUTO_FUZZ=N` runs N random (shape, candidate, target) examples per seed in the property
test instead of 7; `SWAUTO_TIMEOUT=S` sets the seconds a candidate may take before it counts as hung.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from isolation import Outcome, call_isolated, run_isolated

import swauto
from conftest import EXAMPLES, SCATTER_SW
from swauto.api import load
from swauto.backends.host import available_threads
from swauto.errors import Rejected
from swauto.frontend.check import BoundOperator
from swauto.machine import local_memory_machine
from swauto.pipeline import lower
from swauto.reference import reference
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import candidates as space_points

EXHAUSTIVE = bool(os.environ.get("SWAUTO_EXHAUSTIVE"))
FUZZ = int(os.environ.get("SWAUTO_FUZZ") or 0)
TOLERANCE = 1e-4  # max abs error / max abs reference, as `swauto run` checks
# Seconds one candidate may take (compile, and a call at each thread count) before it counts as hung;
# after MAX_HANGS hangs in one batch the rest of it is not run (reported), so a broken compiler fails in
# minutes, not hours. SWAUTO_TIMEOUT=S changes the timeout.
TIMEOUT = float(os.environ.get("SWAUTO_TIMEOUT") or 60.0)
MAX_HANGS = 3
WORKERS = min(2, available_threads())  # children sharing a batch of candidates
THREADS = min(2, available_threads())

# --- the seeds ---------------------------------------------------------------------------------------

BACKWARD_DATA_SW = SCATTER_SW  # in conftest: tests/test_verify.py uses it too

# The same at stride 2: a loop striding through memory fuses into M only with a split of 1.
BACKWARD_DATA_STRIDED_SW = BACKWARD_DATA_SW.replace("split cCo by {2, 4}", "split cCo by {1, 2}")

# The valid-padding convolution, verbatim: 48 of its 480 host candidates (the model's pick
# among them) spun forever, a view's pointer set in one thread phase and used in another.
VALID_CONV_SW = """
operator conv(B = 3, Ni = 5, No = 6, Ri = 6, Ci = 7, Kr = 2, Kc = 3) {
  let Ro = Ri - Kr + 1
  let Co = Ci - Kc + 1
  tensor input[Ri, Ci, Ni, B]
  tensor weight[Kr, Kc, Ni, No]
  tensor output[Ro, Co, B, No]
  compute {
    for cRo in 0..Ro { for cCo in 0..Co { for cKr in 0..Kr { for cKc in 0..Kc {
      gemm(M = B, N = No, K = Ni, A = input[cRo + cKr, cCo + cKc, :K, :M], B = weight[cKr, cKc, :K, :N], C += output[cRo, cCo, :M, :N])
    } } } }
  }
  schedule { split cRo by {2}  split gemm.N by {2, 4}  fuse cKr, cKc  reorder any  vectorize gemm over {M, N} }
}
"""  # noqa: E501 - verbatim from the issue

# On the SW26010 a tile of N must be a multiple of 32, so the seed without its N split.
VALID_CONV_SW26010_SW = VALID_CONV_SW.replace("split gemm.N by {2, 4}  ", "")

CONV_SW = (EXAMPLES / "conv2d.sw").read_text()

# examples/conv2d.sw with both weight layouts among the choices: the space of the VGG16 conv5_1 hang
# (the model's pick never returned from its first call on 2 threads).
CONV_WEIGHT_LAYOUTS_SW = CONV_SW.replace("layout weight any of {[Kr, Kc, Ni, No]}",
                                         "layout weight any of {[Kr, Kc, No, Ni], [Kr, Kc, Ni, No]}", 1)

GEMM_SW = (EXAMPLES / "gemm.sw").read_text()

# A host GEMM whose tiles divide nothing (the host's micro-kernel takes any size; peeled last tiles).
HOST_GEMM_SW = """
operator gemm(M = 200, N = 136, K = 72) {
  tensor A[M, K]
  tensor B[K, N]
  tensor C[M, N]
  compute { gemm(M = M, N = N, K = K, A = A, B = B, C += C) }
  schedule {
    split gemm.M by {24, 128}
    split gemm.N by {40, 136}
    split gemm.K by {7, 32}
    reorder any
    vectorize gemm over {M, N}
  }
}
"""


def test_seed_texts_were_derived() -> None:
    """The derived seeds really differ from the ones they come from (a `replace` that matched)."""
    assert "split cCo by {1, 2}" in BACKWARD_DATA_STRIDED_SW
    assert "gemm.N" not in VALID_CONV_SW26010_SW.split("schedule")[1]
    assert "{[Kr, Kc, No, Ni], [Kr, Kc, Ni, No]}" in CONV_WEIGHT_LAYOUTS_SW


# --- running candidates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A seed at given sizes on one target; on the host, run at each of `threads`."""

    name: str
    source: str
    params: Mapping[str, int]
    target: str
    threads: tuple[int, ...] = (1,)
    seed: int = 0

    def __str__(self) -> str:
        return f"{self.name} {dict(self.params)} target={self.target} threads={list(self.threads)}"


@dataclass
class Checked:
    """What checking a batch found: how many candidates ran, their errors, and every failure in words."""

    count: int = 0
    errors: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    parallel: int = 0  # host candidates whose calls split the parallel nest across threads
    skipped: int = 0  # candidates not run because too many of their batch hung

    def assert_right(self) -> None:
        not_run = f"\n({self.skipped} more candidates not run after {MAX_HANGS} hangs)" if self.skipped else ""
        assert not self.failures, (f"{len(self.failures)} of {self.count} candidate runs failed:\n"
                                   + "\n".join(self.failures) + not_run)
        assert self.count > 0, "no candidate was checked"
        assert max(self.errors) <= TOLERANCE


def random_arrays(op: BoundOperator, seed: int) -> dict[str, np.ndarray]:
    """Random float32 arrays for every tensor (outputs too: a kernel adds into them)."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in op.seed.tensors}


def run_candidate(case: Case, arrays: Mapping[str, np.ndarray], schedule: Candidate | None
                  ) -> dict[int, tuple[dict[str, np.ndarray], int, str]]:
    """In the child: compile `schedule` (None: the model's pick) and call it on copies of `arrays` at each
    thread count; by thread count, the outputs, the parallel iterations and the candidate compiled."""
    results = {}
    kernel = swauto.compile(case.source, dict(case.params), target=case.target, schedule=schedule,
                            threads=case.threads[0] if case.target == "host" else None)
    for threads in case.threads:
        kernel.threads = threads  # the same code at another thread count: what compile(threads=...) sets
        copies = {name: array.copy() for name, array in arrays.items()}
        kernel(**copies)
        outputs = {t.name: copies[t.name] for t in kernel.operator.seed.tensors if t.is_output}
        iterations = kernel.program.parallel_iterations if case.target == "host" else 0
        results[threads] = (outputs, iterations, kernel.schedule.to_json())
    return results


def relative_error(result: np.ndarray, expected: np.ndarray) -> float:
    """Largest absolute error over the largest absolute reference element (NaN when anything is NaN)."""
    scale = float(np.abs(expected).max()) or 1.0
    error = np.abs(result.astype(np.float64) - expected)
    return float("nan") if np.isnan(error).any() else float(error.max()) / scale


def check(case: Case, schedules: Sequence[Candidate | None]) -> Checked:
    """Run every schedule of `case` (None: the model's pick) in forked children and compare with the
    reference; record every wrong result, error, crash and hang (the children share the batch)."""
    checked = Checked()
    op = load(case.source, dict(case.params))
    arrays = random_arrays(op, case.seed)
    expected = reference(op, arrays)
    labels = [f"candidate {s.id} {s.to_json()}" if s is not None else "the model's pick" for s in schedules]
    outcomes = run_isolated(lambda schedule: run_candidate(case, arrays, schedule), list(schedules),
                            timeout=TIMEOUT, workers=WORKERS, labels=labels, max_hangs=MAX_HANGS)
    for outcome in outcomes:
        checked.count += 1
        if outcome.kind == "skipped":
            checked.skipped += 1
            continue
        if not outcome.ok:
            checked.failures.append(f"{case}: {describe(outcome)}")
            continue
        for threads, (outputs, iterations, compiled) in outcome.value.items():
            checked.parallel += iterations > 1 and threads > 1
            for name, value in outputs.items():
                error = relative_error(value, expected[name])
                checked.errors.append(error)
                if not error <= TOLERANCE:
                    label = outcome.label if schedules[outcome.index] is not None else f"the model's pick {compiled}"
                    checked.failures.append(f"{case} threads={threads}: {label}: {name} relative error {error:.3g}")
    return checked


def describe(outcome: Outcome) -> str:
    detail = outcome.detail.strip().splitlines()
    return f"{outcome.label}: {outcome.kind}: {detail[-1] if detail else ''}" + (
        f"\n{outcome.detail}" if outcome.kind == "error" else "")


def one_per_lowering(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate of each group that differs only in the micro-kernel (all under SWAUTO_EXHAUSTIVE);
    the micro-kernels alternate from one group to the next, so each is run."""
    candidates = list(candidates)
    if EXHAUSTIVE:
        return candidates
    groups: dict[Candidate, list[Candidate]] = {}
    for candidate in candidates:
        groups.setdefault(dataclasses.replace(candidate, micro_kernel=None), []).append(candidate)
    return [group[i % len(group)] for i, group in enumerate(groups.values())]


def candidates_of(case: Case, limit: int | None = None) -> list[Candidate]:
    """The candidates of `case` to run: every legal one `swauto.schedules` lists (one per host lowering), or
    (unless SWAUTO_EXHAUSTIVE) a deterministic sample of `limit` legal ones, found without building the
    whole space."""
    if limit is None or EXHAUSTIVE:
        return one_per_lowering(swauto.schedules(case.source, dict(case.params), target=case.target))
    op = load(case.source, dict(case.params))
    return sampled_legal(op, case.target, limit, str(case))


def space_of(op: BoundOperator, target: str) -> list[Candidate]:
    """Every point of the space for `target`, legal or not, in the space's stable order (nothing lowered);
    without micro-kernels."""
    return list(space_points(op, (False, True) if local_memory_machine(target).asynchronous_dma else (False,)))


def legal(op: BoundOperator, target: str, candidate: Candidate) -> bool:
    """Whether `candidate` lowers for `target` (what `swauto.schedules` keeps)."""
    try:
        lower(op, candidate, local_memory_machine(target))
    except Rejected:
        return False
    return True


def with_micro_kernel(candidate: Candidate, target: str, index: int) -> Candidate:
    """`candidate` with the host's `index`-th micro-kernel (cyclically); unchanged for the SW26010."""
    kernels = local_memory_machine(target).micro_kernels
    return dataclasses.replace(candidate, micro_kernel=kernels[index % len(kernels)]) if kernels else candidate


def sampled_legal(op: BoundOperator, target: str, limit: int, key: str,
                  exclude: Callable[[Candidate], bool] = lambda candidate: False) -> list[Candidate]:
    """At most `limit` legal candidates drawn at random (seeded by `key`) from the points of the space
    that `exclude` does not reject, in the space's order; the host's micro-kernels alternate."""
    points = space_of(op, target)
    chosen: dict[int, Candidate] = {}
    for index in random.Random(key).sample(range(len(points)), len(points)):
        candidate = with_micro_kernel(points[index], target, len(chosen))
        if not exclude(candidate) and legal(op, target, candidate):
            chosen[index] = candidate
            if len(chosen) == limit:
                break
    return [chosen[index] for index in sorted(chosen)]


@pytest.fixture(scope="module", autouse=True)
def _calibrated_host_model() -> None:
    """Measure the host model once, in this process, before any child is forked: the children inherit it
    (a calibration that looked disturbed is not stored, and each child would measure it again)."""
    from swauto.tuner import host_model

    host_model.machine()


# --- the harness itself ------------------------------------------------------------------------------


def _spin_or_crash(item: int) -> int:
    if item == 1:
        while True:  # a hang that never returns to the parent
            pass
    if item == 2:
        os._exit(7)
    if item == 3:
        raise ValueError("three")
    return item * 10


def test_isolation_reports_hangs_crashes_and_errors_and_carries_on() -> None:
    """A hung item is killed after the timeout and named; a crash and an exception are named too; the
    items after them still run (in a new child), and results come back in order."""
    outcomes = run_isolated(_spin_or_crash, [0, 1, 2, 3, 4, 5], timeout=1.0, workers=2,
                            labels=[f"item {i}" for i in range(6)])
    assert [o.kind for o in outcomes] == ["ok", "hang", "crash", "error", "ok", "ok"]
    assert [o.value for o in outcomes if o.ok] == [0, 40, 50]
    assert "item 1: hang" in str(outcomes[1]) and "within 1 s" in outcomes[1].detail
    assert "exit code 7" in outcomes[2].detail
    assert "ValueError: three" in outcomes[3].detail
    outcomes = run_isolated(_spin_or_crash, [1, 0, 1, 4, 5], timeout=0.5, max_hangs=2)
    assert [o.kind for o in outcomes] == ["hang", "ok", "hang", "skipped", "skipped"]
    assert "2 items of this batch hung" in outcomes[4].detail
    with pytest.raises(AssertionError, match="the spin: hang"):
        call_isolated(_spin_or_crash, 1, timeout=0.5, label="the spin")
    assert call_isolated(_spin_or_crash, 4) == 40


def test_a_host_kernel_call_returns_its_array_through_the_child() -> None:
    """The harness runs a real host compile and call in the child and hands back the output array."""
    case = Case("host gemm", HOST_GEMM_SW, {"M": 48, "N": 40, "K": 16}, "host")
    op = load(case.source, dict(case.params))
    arrays = random_arrays(op, 1)
    results = call_isolated(run_candidate, case, arrays, None, timeout=TIMEOUT)
    outputs = results[1][0]
    expected = arrays["C"].astype(np.float64) + arrays["A"].astype(np.float64) @ arrays["B"].astype(np.float64)
    assert outputs["C"].shape == (48, 40) and outputs["C"].dtype == np.float32
    assert relative_error(outputs["C"], expected) <= TOLERANCE


# --- overlapping outputs: scatter-form conv backward-data ---------------------------------------------

SAMPLE = 16  # candidates (host: lowerings) run at a sampled shape by default


def shapes(every: dict[str, int], sampled: dict[str, int], more: dict[str, int]) -> list[Any]:
    """Test parameters (sizes, sample limit): by default every candidate at the first shape (the smallest
    space) and a sample of SAMPLE at the second; under SWAUTO_EXHAUSTIVE every candidate at all three."""
    chosen = [(every, None), (sampled, SAMPLE)] + ([(more, None)] if EXHAUSTIVE else [])
    return [pytest.param(params, limit, id=shape_id(params)) for params, limit in chosen]


def shape_id(params: Mapping[str, int]) -> str:
    return "-".join(f"{k}{v}" for k, v in params.items())


BACKWARD_DATA_SHAPES = shapes({"B": 2, "Ni": 3, "No": 5, "Ro": 3, "Co": 3, "Kr": 2, "Kc": 3},
                              {"B": 4, "Ni": 8, "No": 8, "Ro": 5, "Co": 6, "Kr": 3, "Kc": 3},
                              {"B": 1, "Ni": 16, "No": 4, "Ro": 2, "Co": 4, "Kr": 3, "Kc": 2})
BACKWARD_DATA_STRIDED_SHAPES = shapes({"B": 2, "Ni": 4, "No": 6, "Ro": 3, "Co": 4, "Kr": 3, "Kc": 3, "stride": 2},
                                      {"B": 4, "Ni": 8, "No": 8, "Ro": 5, "Co": 6, "Kr": 3, "Kc": 3, "stride": 2},
                                      {"B": 3, "Ni": 5, "No": 3, "Ro": 2, "Co": 3, "Kr": 2, "Kc": 3, "stride": 2})


def at_risk(case: Case, limit: int | None) -> list[Candidate]:
    """`candidates_of(case, limit)`, but where that is every candidate of an SW26010 space: every
    double-buffered one (a prefetch of the next output tile may pass a pending write of this one) and
    (unless SWAUTO_EXHAUSTIVE) a sample of SAMPLE of the others, whose transfers all wait."""
    runs = candidates_of(case, limit)
    if case.target != "sw26010" or limit is not None or EXHAUSTIVE:
        return runs
    single = [candidate for candidate in runs if not candidate.double_buffer]
    sampled = set(random.Random(str(case)).sample(single, min(SAMPLE, len(single))))
    return [candidate for candidate in runs if candidate.double_buffer or candidate in sampled]


@pytest.mark.parametrize("target", ["sw26010", "host"])
@pytest.mark.parametrize(("params", "limit"), BACKWARD_DATA_SHAPES)
def test_scatter_backward_data_every_candidate(target: str, params: dict[str, int], limit: int | None) -> None:
    """Stride 1, image columns fused into M: output boxes overlap from one iteration to the next, so a
    double-buffered prefetch of the next output tile must never pass a pending write of this one."""
    case = Case("scatter backward-data", BACKWARD_DATA_SW, params, target, (THREADS,) if target == "host" else (1,))
    runs = at_risk(case, limit)
    if target == "sw26010":
        assert any(c.double_buffer for c in runs), "the double-buffered candidates are the ones at risk"
    check(case, runs).assert_right()


@pytest.mark.parametrize("target", ["sw26010", "host"])
@pytest.mark.parametrize(("params", "limit"), BACKWARD_DATA_STRIDED_SHAPES)
def test_strided_scatter_backward_data_every_candidate(target: str, params: dict[str, int], limit: int | None
                                                       ) -> None:
    """Stride 2 (a transposed convolution's upsampling): boxes overlap where the kernel is wider than the
    stride; only the split of 1 fuses into M."""
    case = Case("strided scatter backward-data", BACKWARD_DATA_STRIDED_SW, params, target,
                (THREADS,) if target == "host" else (1,))
    runs = at_risk(case, limit)
    if target == "sw26010":
        assert any(c.double_buffer for c in runs)
    check(case, runs).assert_right()


# --- views hoisted out of the parallel nest: the valid-padding convolution and VGG16 conv5_1 ----------

VALID_CONV_SHAPES = shapes({"B": 3, "Ni": 5, "No": 6, "Ri": 6, "Ci": 7, "Kr": 2, "Kc": 3},  # the issue's
                           {"B": 2, "Ni": 3, "No": 8, "Ri": 5, "Ci": 5, "Kr": 3, "Kc": 2},
                           {"B": 1, "Ni": 7, "No": 5, "Ri": 4, "Ci": 9, "Kr": 1, "Kc": 3})


@pytest.mark.parametrize(("params", "limit"), VALID_CONV_SHAPES)
def test_valid_padding_conv_host_every_candidate(params: dict[str, int], limit: int | None) -> None:
    """The issue's hang: every host candidate (and the model's pick) returns, right, on 1 and 2 threads."""
    case = Case("valid-padding conv", VALID_CONV_SW, params, "host", tuple(sorted({1, THREADS})))
    runs: list[Candidate | None] = [None, *candidates_of(case, limit)]
    checked = check(case, runs)
    checked.assert_right()
    if THREADS > 1:
        assert checked.parallel > 0, "some candidate must really split its parallel nest across threads"


@pytest.mark.parametrize(("params", "limit"), VALID_CONV_SHAPES)
def test_valid_padding_conv_sw26010_every_candidate(params: dict[str, int], limit: int | None) -> None:
    """The same convolution on the SW26010 simulator (without the N split the primitive cannot take)."""
    case = Case("valid-padding conv", VALID_CONV_SW26010_SW, params, "sw26010")
    check(case, candidates_of(case, limit)).assert_right()


CONV5_1_SHAPES = [
    {"B": 1, "Ni": 16, "No": 16, "Ri": 14, "Ci": 14, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
    {"B": 1, "Ni": 16, "No": 16, "Ri": 7, "Ci": 7, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
]
CONV5_1_SAMPLE = 16


def _conv5_1_family(candidate: Candidate) -> bool:
    """The model's pick of the issue: split cCo=4; loops cCo_outer > cKr > cKc > cRo; weight [0, 1, 3, 2]."""
    splits = dict(candidate.splits)
    # Rows, kernel rows and columns in tiles of one where conv2d.sw splits them (its loops then `_outer`).
    loops = tuple(name.removesuffix("_outer") for name in candidate.order)
    return (splits.get("cCo") == 4 and all(splits.get(loop, 1) == 1 for loop in ("cRo", "cKr", "cKc"))
            and loops == ("N", "K", "cCo", "cKr", "cKc", "cRo")
            and dict(candidate.layouts).get("weight") == (0, 1, 3, 2))


@pytest.mark.parametrize("params", CONV5_1_SHAPES if EXHAUSTIVE else CONV5_1_SHAPES[:1], ids=shape_id)
def test_vgg16_conv5_1_like_host_candidates(params: dict[str, int]) -> None:
    """examples/conv2d.sw with the benchmark's weight-layout choice at B = 1, pad 1, 3 x 3, on 2 threads:
    the issue's hanging family (every layout, vectorization and micro-kernel of it), the model's pick and
    a sample of the rest (every candidate under SWAUTO_EXHAUSTIVE)."""
    case = Case("VGG16 conv5_1-like", CONV_WEIGHT_LAYOUTS_SW, params, "host", (THREADS,))
    if EXHAUSTIVE:
        runs = swauto.schedules(case.source, dict(case.params), target="host")
    else:
        op = load(case.source, dict(case.params))
        family = [with_micro_kernel(point, "host", k) for point in space_of(op, "host") if _conv5_1_family(point)
                  for k in range(len(local_memory_machine("host").micro_kernels))]
        family = [candidate for candidate in family if legal(op, "host", candidate)]
        assert len(family) >= 8, "the issue's hanging family (2 x 2 layouts x 2 vectorizations) is legal here"
        runs = family + sampled_legal(op, "host", CONV5_1_SAMPLE, str(case), exclude=_conv5_1_family)
    checked = check(case, [None, *runs])
    checked.assert_right()
    if THREADS > 1:
        assert checked.parallel > 0


# --- a GEMM no tile divides ----------------------------------------------------------------------------

GEMM_SHAPES = [{"M": 200, "N": 136, "K": 72}, {"M": 300, "N": 260, "K": 40}]


@pytest.mark.parametrize("target", ["sw26010", "host"])
@pytest.mark.parametrize("params", GEMM_SHAPES if EXHAUSTIVE else GEMM_SHAPES[:1], ids=shape_id)
def test_gemm_with_uneven_tiles_every_candidate(target: str, params: dict[str, int]) -> None:
    """examples/gemm.sw at sizes its tiles do not divide: the compiler peels the short last tiles (and on
    the SW26010 pads them with zeros for the primitive). On the host every lowering, its micro-kernels
    in turn (every register tile meets every kind of edge), on one thread and two."""
    case = Case("gemm", GEMM_SW, params, target, tuple(sorted({1, THREADS})) if target == "host" else (1,))
    check(case, candidates_of(case)).assert_right()


def test_host_gemm_with_tiles_that_divide_nothing() -> None:
    """On the host any tile size is legal: tiles of 24 x 40 x 7 leave a short last tile on every axis."""
    case = Case("host gemm", HOST_GEMM_SW, {"M": 200, "N": 136, "K": 72}, "host", (THREADS,))
    op = load(case.source, dict(case.params))
    assert any(dict(c.splits) == {"M": 24, "N": 40, "K": 7} and legal(op, "host", c) for c in space_of(op, "host"))
    check(case, candidates_of(case, SAMPLE)).assert_right()


# --- the property test: (seed, shape, candidate, target) at random -------------------------------------

PROPERTY_SEEDS = ("scatter backward-data", "strided scatter backward-data", "valid-padding conv", "conv2d")


@st.composite
def problems(draw: st.DrawFn, name: str) -> tuple[str, dict[str, int], str]:
    """(source, sizes, target) for the seed `name`: small random sizes that keep every size positive and
    some candidate of the seed legal (its splits need an extent of at least 2), and a random target."""
    target = draw(st.sampled_from(("sw26010", "host")))
    small = st.integers(1, 9)
    if name in ("scatter backward-data", "strided scatter backward-data"):
        strided = name.startswith("strided")
        params = {"B": draw(st.integers(1, 4)), "Ni": draw(small), "No": draw(small),
                  "Ro": draw(st.integers(2, 5)), "Co": draw(st.integers(1 if strided else 2, 6)),
                  "Kr": draw(st.integers(1, 3)), "Kc": draw(st.integers(1, 3)),
                  "stride": draw(st.sampled_from((1, 2))) if strided else 1}
        source = BACKWARD_DATA_STRIDED_SW if strided else BACKWARD_DATA_SW
    elif name == "valid-padding conv":
        kr, kc = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        params = {"B": draw(st.integers(1, 4)), "Ni": draw(small), "No": draw(st.integers(2, 9)),
                  "Ri": kr + draw(st.integers(1, 4)), "Ci": kc + draw(st.integers(0, 5)), "Kr": kr, "Kc": kc}
        source = VALID_CONV_SW if target == "host" else VALID_CONV_SW26010_SW
    else:
        kr, kc = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        pad, stride = draw(st.sampled_from((0, 1))), draw(st.sampled_from((1, 2)))
        # Ro = (Ri + 2 pad - Kr) / stride + 1 >= 1 needs Ri + 2 pad >= Kr; likewise Ci.
        params = {"B": draw(st.integers(1, 4)), "Ni": draw(small), "No": draw(small),
                  "Ri": max(1, kr - 2 * pad) + draw(st.integers(0, 6)),
                  "Ci": max(1, kc - 2 * pad) + draw(st.integers(0, 6)),
                  "Kr": kr, "Kc": kc, "stride": stride, "pad": pad}
        source = CONV_SW
    return source, params, target


def legal_candidate(op: BoundOperator, target: str, start: int, micro: int) -> Candidate | None:
    """The first legal point of the space from index `start` on (cyclically), without building the whole
    space; on the host with the `micro`-th micro-kernel."""
    points = space_of(op, target)
    for offset in range(len(points)):
        candidate = with_micro_kernel(points[(start + offset) % len(points)], target, micro)
        if legal(op, target, candidate):
            return candidate
    return None


@pytest.mark.parametrize("name", PROPERTY_SEEDS)
@settings(max_examples=FUZZ or 7, deadline=None, derandomize=not FUZZ, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data(), index=st.integers(0, 10**6), micro=st.integers(0, 7))
def test_random_shape_candidate_and_target_match_the_reference(name: str, data: st.DataObject, index: int,
                                                                micro: int) -> None:
    """For each seed (the ones above and examples/conv2d.sw: parametrized rather than drawn, so that each
    gets its share of the examples), random small sizes, a random target and a random legal candidate:
    the kernel returns within the timeout and matches the reference. Deterministic by default (7 examples
    a seed); SWAUTO_FUZZ=N runs N random examples a seed."""
    _check_random(name, *data.draw(problems(name), label="problem"), index, micro)


def _check_random(name: str, source: str, params: dict[str, int], target: str, index: int, micro: int) -> None:
    """The legal candidate from `index` on (with the `micro`-th micro-kernel) returns and is right."""
    event(f"{name} on {target}")
    op = load(source, params)
    candidate = legal_candidate(op, target, index, micro)
    assume(candidate is not None)
    case = Case(name, source, params, target, (THREADS,) if target == "host" else (1,), seed=index)
    check(case, [candidate]).assert_right()


# The operators of several statements and primitives (examples/*.sw of issue 9), at random sizes.
OPERATOR_SEEDS = ("fc_bias_relu", "maxpool", "conv2d_nchw")


@st.composite
def operator_problems(draw: st.DrawFn, name: str) -> tuple[str, dict[str, int], str]:
    """(source, sizes, target) for example `name`: sizes at least its smallest tile sizes."""
    target = draw(st.sampled_from(("sw26010", "host")))
    if name == "fc_bias_relu":  # tiles of 128 along N, 64 along K, 128 for the element-wise statements
        params = {"B": draw(st.integers(1, 9)), "In": draw(st.integers(64, 200)), "Out": draw(st.integers(128, 300))}
    elif name == "maxpool":
        k, stride = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        params = {"B": draw(st.integers(1, 4)), "C": draw(st.integers(1, 6)), "K": k, "stride": stride,
                  "Ri": k + draw(st.integers(0, 5)), "Ci": k + draw(st.integers(0, 5))}
    else:
        kr, kc = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        pad, stride = draw(st.sampled_from((0, 1))), draw(st.sampled_from((1, 2)))
        params = {"B": draw(st.integers(1, 3)), "Ni": draw(st.integers(1, 6)), "No": draw(st.integers(1, 6)),
                  "Ri": max(1, kr - 2 * pad) + draw(st.integers(0, 5)),
                  "Ci": max(1, kc - 2 * pad) + draw(st.integers(0, 5)),
                  "Kr": kr, "Kc": kc, "stride": stride, "pad": pad}
    return (EXAMPLES / f"{name}.sw").read_text(), params, target


@pytest.mark.parametrize("name", OPERATOR_SEEDS)
@settings(max_examples=FUZZ or 3, deadline=None, derandomize=not FUZZ, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data(), index=st.integers(0, 10**6), micro=st.integers(0, 7))
def test_random_operator_shape_candidate_and_target_match_the_reference(name: str, data: st.DataObject, index: int,
                                                                         micro: int) -> None:
    """The same property for operators of several statements (fusion and strided boxes included): 3
    deterministic examples a seed, SWAUTO_FUZZ=N random ones."""
    _check_random(name, *data.draw(operator_problems(name), label="problem"), index, micro)
