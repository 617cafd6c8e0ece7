"""Targets are plugins: each backend registers one `Target`, and the API and the CLI dispatch through it.

A target says what it is (its machine description, the tuners it offers, its cost model), how a
candidate's final IR becomes a program that runs, and which figures it adds to a kernel's report. The
built-in targets live in their backends (`backends/host/target.py`, `backends/sw26010/target.py`) and
are imported on first `get`, so importing swauto stays light. Adding a target: a package that calls
`register`, and its module path in `_BUILTIN` here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from swauto.errors import ArgumentError

if TYPE_CHECKING:
    import numpy as np

    from swauto.frontend.check import BoundOperator
    from swauto.ir.nodes import Module
    from swauto.machine import LocalMemoryMachine
    from swauto.pipeline import Stages
    from swauto.schedule.candidate import Candidate
    from swauto.tuner.cost_model import Estimate
    from swauto.tuner.sketch import SketchModel

# The built-in targets, in the order they are listed, and the module that registers each.
_BUILTIN: dict[str, str] = {
    "host": "swauto.backends.host.target",
    "sw26010": "swauto.backends.sw26010.target",
}
_registered: dict[str, Target] = {}


class Program(Protocol):
    """A candidate built for a target: its generated `code`, and `run`, which computes on NumPy arrays
    by tensor name (outputs updated in place) and returns the figures the call adds to the kernel's
    report (None: none)."""

    @property
    def code(self) -> str: ...

    def run(self, arrays: dict[str, np.ndarray], threads: int) -> Mapping[str, Any] | None: ...

    def prepack(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What the program arranges once from the constant tensors (`Tensor.is_constant`) among `arrays`,
        by name: `run` given these with the same constants skips that work (empty: nothing to arrange)."""
        ...


@dataclass(frozen=True)
class Target:
    """One target a kernel can be compiled for."""

    name: str  # what users pass as `target` (and the CLI as --target)
    description: str  # one line: what runs the kernels
    machine: Callable[[], LocalMemoryMachine]  # the description the scheduler and the passes use
    tuners: tuple[str, ...]  # the tuners it offers, "model" (rank by `estimate`) first
    model_name: str  # what reports call its analytic model
    runs_on: str  # where its non-model tuners run candidates, in a sentence ("the host")
    tuner_hint: str  # the advice when a tuner it does not offer is asked for
    threaded: bool  # a call runs on `threads` cores of this machine (else: on one simulated unit)
    # The analytic model: (stages, threads, the candidate's micro-kernel or None) -> predicted time.
    estimate: Callable[[Stages, int, tuple[int, int] | None], Estimate]
    peak_flops: Callable[[int], float]  # flops per second a percent of peak is measured against, per threads
    build: Callable[[Module, Candidate], Program]  # the final IR of a candidate -> its runnable program
    # The non-model tuners: (operator, tuner, threads, machine, max_candidates) -> (candidate, stages).
    tune: Callable[[BoundOperator, str, int, LocalMemoryMachine, int], tuple[Candidate, Stages]]
    # Figures of its own a kernel's report gains: (final IR, the operator's flops) -> report entries.
    report: Callable[[Module, int], Mapping[str, Any]]
    # What `swauto run` prints of a call it does not time itself (not threaded): report -> lines.
    describe_call: Callable[[Mapping[str, Any]], list[str]]
    # What its non-model tuners score a candidate by: (final IR, candidate, threads) -> seconds of a call,
    # run where `runs_on` says (measured on the host, timed by the SW26010's simulator).
    run_seconds: Callable[[Module, Candidate, int], float]
    # The analytic model as ranking before lowering uses it (`swauto.tuner.sketch.SketchModel`), for one
    # tuning on `threads` cores: what the model tuner ranks by before it lowers the fastest few; None: it
    # lowers them all.
    sketch_model: Callable[[int], SketchModel] | None = None
    # What its tuners read of this machine beyond swauto's source (the host's measured constants), as text:
    # the tuning log keys on it, so a choice made under another calibration is made again.
    calibration: Callable[[], str] = lambda: ""
    # How much faster (relative) than the machine's first micro-kernel another must be priced for the
    # ranking to tell them apart (`swauto.tuner.cost_model.tied_micro_kernels`): register tiles whose
    # calibrated speeds are this close count as tied. 0: every difference counts (one micro-kernel).
    micro_kernel_tolerance: float = 0.0


def register(target: Target) -> Target:
    """Make `target` available under its name (a backend's target module calls this on import)."""
    _registered[target.name] = target
    return target


def names() -> tuple[str, ...]:
    """The names of every target, the built-in ones first; importing none of them."""
    return tuple(_BUILTIN) + tuple(name for name in _registered if name not in _BUILTIN)


def get(name: object) -> Target:
    """The target called `name` (its backend imported on first use); an ArgumentError for any other."""
    if not isinstance(name, str) or name not in names():
        raise ArgumentError(f"unknown target {name!r}; choose one of {', '.join(names())}")
    if name not in _registered:
        importlib.import_module(_BUILTIN[name])
    return _registered[name]
