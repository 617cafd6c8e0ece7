"""The Python API: `compile` a `.sw` operator into a callable `Kernel`, list its `schedules`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from swauto import targets
from swauto.errors import ArgumentError, Rejected, ScheduleError, SwautoError, UnsupportedSizes
from swauto.frontend import ast
from swauto.frontend.check import BoundOperator, Layouts, check, pin_layouts
from swauto.frontend.constants import split_constants
from swauto.frontend.integers import check_integer
from swauto.frontend.parser import parse
from swauto.frontend.source import Source
from swauto.ir.analysis import traffic
from swauto.ir.memory import inverse_axes
from swauto.ir.nodes import Module
from swauto.ir.printer import format_module
from swauto.machine import LocalMemoryMachine
from swauto.pipeline import lower
from swauto.schedule.candidate import Candidate
from swauto.targets import Program, Target
from swauto.tuner import database
from swauto.tuner.cost_model import Estimate
from swauto.tuner.model_tuner import Ranked, rank
from swauto.tuner.space import MAX_CANDIDATES, Space, explore, explore_ranked

DEFAULT_TARGET = "host"  # what `compile` builds for unless told
DEFAULT_SCHEDULES_TARGET = "sw26010"  # whose rules `schedules` applies unless told
TUNERS = ("model", "measure", "simulate", "hybrid")  # each target offers some (`Target.tuners`)


def load(source: str | Path, params: Mapping[str, object] | None = None, layouts: Layouts | None = None,
         constants: Collection[str] = ()) -> BoundOperator:
    """Parse and check a `.sw` file (path or text) with its size parameters bound, the tensors of
    `layouts` pinned to one memory layout each (`swauto.frontend.check.pin_layouts`), and the inputs
    `constants` marked constant (`Tensor.is_constant`, as `compile`'s; no prologue is split off)."""
    op = _parsed(source, params, layouts)[2]
    return _constant(op, _check_constants(op, constants)) if constants else op


def _parsed(source: str | Path, params: Mapping[str, object] | None, layouts: Layouts | None
            ) -> tuple[Source, ast.Operator, BoundOperator]:
    """`load`'s text, syntax tree and checked operator (`compile` splits the tree at its constants)."""
    if not isinstance(source, str | os.PathLike):
        raise ArgumentError(f"source must be a path or the text of a .sw file, got {type(source).__name__}")
    if layouts is not None and not isinstance(layouts, Mapping):
        raise ArgumentError(f"layouts maps tensor names to their axes in memory order, got {type(layouts).__name__}")
    src = Source.load(Path(source) if isinstance(source, os.PathLike) else source)
    tree = parse(src)
    return src, tree, check(tree, src, {} if params is None else params, layouts)


def schedules(source: str | Path, params: Mapping[str, object] | None = None,
              target: str = DEFAULT_SCHEDULES_TARGET, max_candidates: int = MAX_CANDIDATES,
              layouts: Layouts | None = None) -> list[Candidate]:
    """Every legal candidate schedule of the operator at these sizes for `target`, in the space's stable
    order (the same space on both targets; what is legal differs: the host has no primitive constraints
    and sizes its buffers for its caches). A space of more than `max_candidates` is refused. `layouts`
    pins tensors' memory layouts as `compile`'s does."""
    plugin = targets.get(target)
    return explore(load(source, params, layouts), plugin.machine(), max_candidates=max_candidates).candidates


def _resolve(op: BoundOperator, schedule: Candidate | str | Mapping[str, Any], machine: LocalMemoryMachine,
             max_candidates: int):
    """The stages of the candidate the user named: a Candidate, its id, or its JSON form."""
    if not isinstance(schedule, Candidate | str | Mapping):
        raise ArgumentError(f"schedule must be a Candidate, its id or its JSON form, got {type(schedule).__name__}")
    if isinstance(schedule, str) and not schedule.lstrip().startswith("{"):
        space = explore(op, machine, max_candidates=max_candidates)
        for candidate, stages in space.legal:
            if candidate.id == schedule:
                return candidate, stages
        raise ScheduleError(
            f"no legal candidate has id {schedule} for operator {op.name} with {op.params}; "
            f"`swauto schedules` lists them"
        )
    candidate = schedule if isinstance(schedule, Candidate) else Candidate.from_json(schedule)
    _check_in_space(op, candidate)
    try:
        return candidate, lower(op, candidate, machine)
    except Rejected as rejection:
        raise ScheduleError(f"candidate {candidate.id} is not legal here: {rejection}") from None


def _check_in_space(op: BoundOperator, candidate: Candidate) -> None:
    """Refuse, naming what the schedule block allows, a candidate that splits other targets or orders
    other loops than this operator's schedule (the rest is checked, with its reason, when lowering)."""
    split = sorted(s.target for s in op.space.splits)
    if sorted(target for target, _ in candidate.splits) != split:
        splits = ", ".join(target for target, _ in candidate.splits) or "nothing"
        raise ScheduleError(f"candidate {candidate.id} splits {splits}; the schedule block of {op.name} splits "
                            f"{', '.join(split) or 'nothing'}")
    if sorted(candidate.order) != sorted(op.space.loops):
        raise ScheduleError(f"candidate {candidate.id} orders the loops {', '.join(candidate.order) or '(none)'}; "
                            f"the loops of {op.name}'s schedule are {', '.join(op.space.loops) or '(none)'}, "
                            f"each exactly once")


def _check_choice(value: object, allowed: tuple[str, ...], what: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ArgumentError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
    return value  # type: ignore[return-value]


def compile(  # noqa: A001 - the public name users expect
    source: str | Path,
    params: Mapping[str, object] | None = None,
    target: str = DEFAULT_TARGET,
    schedule: Candidate | str | Mapping[str, Any] | None = None,
    tuner: str = "model",
    threads: int | None = None,
    max_candidates: int = MAX_CANDIDATES,
    layouts: Layouts | None = None,
    constants: Collection[str] = (),
) -> Kernel:
    """Compile the operator in `source` (a path or `.sw` text) for `target`.

    Without `schedule`, the tuner picks the candidate; with one (a Candidate from `schedules`, its id,
    or its JSON form) that candidate is compiled. On the host, a kernel runs on at most `threads` cores
    (default: all this process may use), on one where the host model predicts its call too small to share
    (as BLAS libraries and PyTorch treat their thread counts); with a `schedule`, on `threads` exactly
    (nothing is left to decide). The `measure` tuner times every candidate there and `hybrid` the model's best few.
    On sw26010 the `simulate` tuner times every candidate on the timed simulator and `hybrid` the
    model's best few. A schedule space of more than `max_candidates` candidates is refused before it is built.
    `layouts` keeps tensors in given memory layouts (`{"output": ["Ro", "Co", "B", "No"]}`: the declared
    axes in memory order, by name or index; one of those the schedule allows), as a caller whose arrays
    are already arranged that way wants (`Kernel.run_arranged` then converts nothing).

    `constants` names inputs that do not change between calls (a network's weights): the statements
    that compute from them alone (a Winograd convolution's filter transforms) are compiled apart, as
    the kernel's `prologue`, which `Kernel.prepare` runs once; the kernel itself, and its predicted time,
    is what runs at each call after that (`swauto.frontend.constants`). `schedule` then names a candidate
    of that per-call part.
    """
    return _compile(source, params, target, schedule, tuner, threads, max_candidates, layouts, constants)


def _compile(source: str | Path, params: Mapping[str, object] | None, target: str,
             schedule: Candidate | str | Mapping[str, Any] | None, tuner: str, threads: int | None,
             max_candidates: int, layouts: Layouts | None, constants: Collection[str],
             deferred: bool = False) -> Kernel:
    """`compile`; with `deferred`, the kernel's program (and its prologue's) is built where it is first
    used (`_Deferred`), as `choose` wants for the algorithms it does not keep."""
    plugin = targets.get(target)
    _check_choice(tuner, TUNERS, "tuner")
    check_integer(max_candidates, "max_candidates", 1)  # now: the tuning log may spare building the space
    if threads is not None:
        cores = available_threads()
        threads = check_integer(threads, "threads", 1, cores, why=f"the cores this process may run on: {cores}")
    if tuner not in plugin.tuners:
        raise ArgumentError(_tuner_refusal(tuner, plugin))
    started = time.perf_counter()
    src, tree, whole = _parsed(source, params, layouts)  # errors point at the user's operator
    names = _check_constants(whole, constants)
    split = split_constants(tree, names) if names else None
    if split is None:
        kernel = _compile_checked(_constant(whole, names), plugin, schedule, tuner, threads, max_candidates, started,
                                  deferred)
        return replace(kernel, constants=names) if names else kernel
    ops = [_check_part(part, src, whole, split.handed, layouts or {}) for part in (split.prologue, split.body)]
    prologue = _compile_checked(ops[0], plugin, None, tuner, threads, max_candidates, time.perf_counter(), deferred)
    # What the prologue hands over is as constant as what it computed it from.
    body = _compile_checked(_constant(ops[1], (*names, *split.handed)), plugin, schedule, tuner, threads,
                            max_candidates, started, deferred)
    body.report["prologue_predicted_s"] = prologue.report["predicted_s"]
    interface = tuple((t.name, t.shape) for t in whole.seed.tensors if not t.is_local)
    return replace(body, prologue=prologue, constants=names, handed=split.handed, interface=interface)


def _compile_checked(op: BoundOperator, plugin: Target, schedule: Candidate | str | Mapping[str, Any] | None,
                     tuner: str, threads: int | None, max_candidates: int, started: float,
                     deferred: bool = False) -> Kernel:
    """`compile` of a checked operator (see there); `deferred` as `_compile`'s."""
    host_threads = threads or available_threads()
    machine = plugin.machine()
    if schedule is not None:
        candidate, stages = _resolve(op, schedule, machine, max_candidates)
        remembered = False
    else:
        # The tuning log answers a request tuned before (same source, sizes, target, tuner, threads, calibration).
        key = database.request_key(op.source.text, op.params, plugin.name, tuner,
                                   host_threads if plugin.threaded else 1, op.space.layouts, plugin.calibration(),
                                   op.name, [t.name for t in op.seed.tensors if t.is_constant])
        candidate, stages = _remembered(op, database.lookup(key), machine)
        remembered = candidate is not None
        if not remembered:
            candidate, stages = _tune(op, plugin, tuner, host_threads, machine, max_candidates)
            database.record(key, candidate, {"operator": op.name, "params": op.params, "target": plugin.name,
                                             "tuner": tuner, "tuning_s": time.perf_counter() - started})
    tuning_seconds = time.perf_counter() - started
    predicted = plugin.estimate(stages, host_threads if plugin.threaded else 1, candidate.micro_kernel)
    if schedule is None and plugin.threaded and host_threads > 1:
        alone = plugin.estimate(stages, 1, candidate.micro_kernel)
        if alone.seconds <= predicted.seconds:  # nothing to share, or too small a call: waking and joining costs more
            host_threads, predicted = 1, alone
    threads = host_threads if plugin.threaded else 1
    module = stages[-1][1]
    program = _Deferred(lambda: plugin.build(module, candidate)) if deferred else plugin.build(module, candidate)
    report = _report(op, candidate, stages, plugin, threads, predicted, tuning_seconds)
    report["from_tuning_log"] = remembered
    return Kernel(op, candidate, stages, plugin.name, program, report, host_threads)


def _constant(op: BoundOperator, names: Collection[str]) -> BoundOperator:
    """`op` with its tensors `names` marked constant (`Tensor.is_constant`): a target may arrange them once,
    at `Kernel.prepare`."""
    if not names:
        return op
    tensors = tuple(replace(t, is_constant=t.name in names) for t in op.seed.tensors)
    return replace(op, seed=replace(op.seed, tensors=tensors))


def _check_constants(op: BoundOperator, constants: Collection[str]) -> tuple[str, ...]:
    """The names of `constants`, each an input of `op` (not an output, not a local tensor)."""
    if isinstance(constants, str) or not isinstance(constants, Collection):
        raise ArgumentError(f"constants lists input tensors by name, got {constants!r}")
    kinds = {t.name: "local" if t.is_local else "an output" if t.is_output else "an input" for t in op.seed.tensors}
    inputs = [name for name, kind in kinds.items() if kind == "an input"]
    for name in constants:
        if name not in inputs:
            raise ArgumentError(f"{op.name} cannot take {name!r} as a constant: it is "
                                f"{kinds.get(name, 'not one of its tensors')}; its inputs are {', '.join(inputs)}")
    return tuple(name for name in inputs if name in constants)


def _check_part(part: ast.Operator, src: Source, whole: BoundOperator, handed: tuple[str, ...],
                layouts: Layouts) -> BoundOperator:
    """`part` of a split of `whole`, checked, with the user's `layouts` of its arguments pinned, and the
    tensors `handed` from prologue to body kept in their declared layout where its schedule allows that
    (else a call converts them, as any tensor kept in another layout)."""
    arguments = {t.name for t in part.tensors if not t.local}
    op = check(part, src, whole.params, {name: order for name, order in layouts.items() if name in arguments})
    declared = {name: tuple(range(len(whole.seed.tensor(name).shape))) for name in handed}
    kept = {choice.tensor: declared[choice.tensor] for choice in op.space.layouts
            if choice.tensor in declared and declared[choice.tensor] in choice.permutations}
    return replace(op, space=pin_layouts(op.space, part, kept)) if kept else op


def choose(
    sources: list[str | Path] | tuple[str | Path, ...],
    params: Mapping[str, object] | None = None,
    target: str = DEFAULT_TARGET,
    tuner: str = "model",
    threads: int | None = None,
    max_candidates: int = MAX_CANDIDATES,
    constants: Collection[str] = (),
    layouts: Layouts | None = None,
) -> Kernel:
    """Compile each of `sources` (the same operator written as different algorithms, such as the
    implicit, explicit and Winograd convolutions: the same parameters and argument tensors) and return
    the fastest kernel: the one the model predicts fastest with the model tuner; with a tuner that runs
    candidates (`measure`, `simulate`, `hybrid`), the one that runs fastest where that tuner runs them
    (each algorithm's pick run again: measured on the host, timed by the SW26010's simulator). Its
    `report["alternatives"]` lists every source with its predicted time, the seconds compared
    (`seconds`) and candidate, or why it does not apply (a `require` that fails, no legal
    candidate); `report["why"]` says why the choice was made, in a sentence. With `constants` (see
    `compile`), what is compared is a call once they are prepared, their prologue's time apart;
    `layouts` (see `compile`) hold for every source."""
    if isinstance(sources, str | Path) or not sources:
        raise ArgumentError("choose takes a list of at least one .sw source (the algorithms to choose among)")
    plugin = targets.get(target)
    kernels: list[tuple[Kernel, dict[str, Any]]] = []  # each applying source's kernel and its alternative
    alternatives: list[dict[str, Any]] = []
    for source in sources:
        try:  # built only if kept (code generation and LLVM: half of a fresh compile of ResNet-18 at 32²)
            kernel = _compile(source, params, target, None, tuner, threads, max_candidates, layouts, constants,
                              deferred=True)
        except (UnsupportedSizes, ScheduleError) as error:  # this algorithm does not apply to these sizes
            name = _operator_name(source)
            alternatives.append({"operator": name, "applies": False, "reason": str(error)})
            continue
        name = kernel.operator.name
        if kernels and _interface(kernel) != _interface(kernels[0][0]):
            first = kernels[0][0]
            raise ArgumentError(f"{name} takes {_show_interface(kernel)} where {first.operator.name} takes "
                                f"{_show_interface(first)}; choose among sources of one operator")
        # A tuner that runs candidates chose each algorithm's pick by running it: so is the algorithm chosen.
        seconds = (kernel.report["predicted_s"] if tuner == "model"
                   else plugin.run_seconds(kernel.module, kernel.schedule, kernel.threads))
        alternatives.append({"operator": name, "applies": True, "predicted_s": kernel.report["predicted_s"],
                             "seconds": seconds, "candidate": kernel.schedule.id,
                             "schedule": kernel.report["schedule"]})
        kernels.append((kernel, alternatives[-1]))
    if not kernels:
        reasons = "; ".join(f"{a['operator']}: {a['reason']}" for a in alternatives)
        raise ScheduleError(f"none of the {len(alternatives)} algorithms applies: {reasons}")
    best, chosen = min(kernels, key=lambda pair: pair[1]["seconds"])
    name, seconds = chosen["operator"], chosen["seconds"]
    others = [f"{a['operator']} {a['seconds'] * 1e3:.4g} ms ({a['seconds'] / seconds:.2f}x)"
              for a in alternatives if a["applies"] and a is not chosen]
    skipped = [f"{a['operator']} does not apply ({a['reason']})" for a in alternatives if not a["applies"]]
    how = "is predicted fastest" if tuner == "model" else f"runs fastest on {plugin.runs_on}"
    why = f"{name} {how} at {seconds * 1e3:.4g} ms"
    why += f", against {', '.join(others)}" if others else " (the only algorithm that applies)"
    best.report["alternatives"] = alternatives
    best.report["why"] = "; ".join([why, *skipped])
    return _built(best)


class _Deferred:
    """A target's program built where it is first used (a `Program`)."""

    def __init__(self, build: Callable[[], Program]) -> None:
        self._build = build
        self._program: Program | None = None

    def built(self) -> Program:
        if self._program is None:
            self._program = self._build()
        return self._program

    @property
    def code(self) -> str:
        return self.built().code

    def run(self, arrays: dict[str, np.ndarray], threads: int) -> Mapping[str, Any] | None:
        return self.built().run(arrays, threads)

    def prepack(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.built().prepack(arrays)


def _built(kernel: Kernel) -> Kernel:
    """`kernel` with its program, and its prologue's, built now (`_Deferred`): a code generation error
    comes up where the kernel is made, not at its first call."""
    program = kernel.program.built() if isinstance(kernel.program, _Deferred) else kernel.program
    return replace(kernel, program=program, prologue=kernel.prologue and _built(kernel.prologue))


def _operator_name(source: str | Path) -> str:
    """The operator name a source declares (for reports about a source that did not compile)."""
    try:
        return parse(Source.load(source)).name
    except SwautoError:
        return str(source)


def _interface(kernel: Kernel) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(kernel.shapes.items())


def _show_interface(kernel: Kernel) -> str:
    return ", ".join(f"{name}{list(shape)}" for name, shape in _interface(kernel))


def _report(op: BoundOperator, candidate: Candidate, stages: list[tuple[str, Module]], plugin: Target,
            threads: int, predicted: Estimate, tuning_seconds: float) -> dict[str, Any]:
    """What `Kernel.report` says before the first call: the candidate, the work and the predictions
    (`predicted`: the target's estimate on `threads`)."""
    module = stages[-1][1]
    flops = traffic(op.seed)[1]  # the operator's own work, not the zeros of padding
    report = {
        "operator": op.name,
        "params": dict(op.params),
        "target": plugin.name,
        "candidate": candidate.id,
        "schedule": candidate.describe(),
        "flops": flops,
        "dma_bytes": predicted.dma_bytes,
        "predicted_s": predicted.seconds,
        "predicted_gflops": flops / predicted.seconds / 1e9,
        "predicted_peak_fraction": flops / predicted.seconds / plugin.peak_flops(threads),
        "layouts": {t.name: list(t.layout) for t in module.tensors if t.layout},
        "layout_conversion_s": 0.0,  # a call's, where it converts (`Kernel._call`)
        "tuning_s": tuning_seconds,
        "threads": threads,
    }
    report.update(plugin.report(module, flops))  # the target's own figures (sw26010: simulated time)
    return report


def _tuner_refusal(tuner: str, plugin: Target) -> str:
    """Why `tuner` is refused for `plugin`: where the tuner runs candidates, and what to use instead."""
    owner = next(targets.get(name) for name in targets.names() if tuner in targets.get(name).tuners)
    return f"the {tuner} tuner runs candidates on {owner.runs_on}; {plugin.tuner_hint}"


def _remembered(op: BoundOperator, candidate: Candidate | None, machine: LocalMemoryMachine):
    """The logged candidate and its stages, or (None, None) when there is none or it is no longer legal."""
    if candidate is None:
        return None, None
    try:
        return candidate, lower(op, candidate, machine)
    except (Rejected, SwautoError):
        return None, None


def _tune(op: BoundOperator, target: Target, tuner: str, threads: int, machine: LocalMemoryMachine,
          max_candidates: int):
    """The tuner's choice among every legal candidate: (candidate, stages)."""
    if tuner != "model":
        return target.tune(op, tuner, threads, machine, max_candidates)
    best = tune_by_model(op, target, threads, max_candidates)[0][0]
    return best.candidate, best.stages


def tune_by_model(op: BoundOperator, target: Target, threads: int = 1,
                  max_candidates: int = MAX_CANDIDATES) -> tuple[list[Ranked], Space]:
    """What the model tuner does: the candidates it lowers, ranked by the target's model on their real
    IR (fastest first), and the space they came from. With a sketch model the target ranks every
    candidate's sketch first and lowers only the cheapest (`explore_ranked`); without, it lowers all."""
    threads = threads if target.threaded else 1
    machine = target.machine()
    if target.sketch_model is None:
        space = explore(op, machine, max_candidates=max_candidates)
    else:
        space = explore_ranked(op, machine, target.sketch_model(threads), max_candidates=max_candidates)
    return rank(space, target.name, threads), space


def available_threads() -> int:
    from swauto.backends.host import available_threads

    return available_threads()


def as_array(value: object, what: str) -> np.ndarray:
    """`value` as a NumPy array: itself, or, for any array that speaks DLPack (a PyTorch tensor, a
    JAX or CuPy array on the CPU), a NumPy view of its memory (no copy: outputs are written into it)."""
    if isinstance(value, np.ndarray):
        return value
    if not hasattr(value, "__dlpack__"):
        raise ArgumentError(f"{what} must be a NumPy array or an array that speaks DLPack, got {type(value).__name__}")
    try:
        return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:  # another device, an unknown dtype
        raise ArgumentError(f"{what} ({type(value).__name__}) cannot be seen from the CPU as a NumPy array: "
                            f"{error}") from None


@dataclass
class Kernel:
    """A compiled operator: call it with arrays named after its tensors (NumPy's, or any that speaks
    DLPack: outputs are updated in place); `.schedule`, `.ir`, `.code` and `.report` tell what was
    built. `compile` makes it; it only holds the result and runs the target's program.

    Compiled with `constants`, `prepare` binds them; a kernel split at its constants (`prologue`, the
    statements that compute from them alone) is then the per-call part: `.schedule`, `.ir`, `.code`
    and `.report` describe that part, `.prologue` the other."""

    operator: BoundOperator
    schedule: Candidate
    stages: list[tuple[str, Module]]
    target: str
    program: Program = field(repr=False)
    report: dict[str, Any]
    threads: int = 1  # cores a call runs on (a threaded target's)
    prologue: Kernel | None = field(default=None, repr=False)  # what `prepare` runs on the constants
    constants: tuple[str, ...] = ()  # inputs that do not change between calls (`compile(constants=...)`)
    handed: tuple[str, ...] = ()  # the prologue's outputs, which this kernel's program reads
    interface: tuple[tuple[str, tuple[int, ...]], ...] | None = None  # with a prologue: the whole's arrays
    # The operator's local tensors (intermediates), allocated at the first call and kept.
    _locals: dict[str, np.ndarray] | None = field(default=None, init=False, repr=False)

    @property
    def code(self) -> str:
        """The generated code (LLVM IR on the host, the CPE program on the SW26010)."""
        return self.program.code

    @property
    def module(self) -> Module:
        """The final IR."""
        return self.stages[-1][1]

    @property
    def ir(self) -> str:
        """The final IR, printed."""
        return format_module(self.module)

    @cached_property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The declared shape of each array a call takes, in declaration order (not the operator's
        local tensors)."""
        if self.interface is not None:
            return dict(self.interface)
        return {t.name: t.shape for t in self.operator.seed.tensors if not t.is_local}

    @property
    def tensors(self) -> tuple[str, ...]:
        """The names of the arrays a call takes, in declaration order (not the operator's local tensors)."""
        return tuple(self.shapes)

    @cached_property  # a call checks its arrays against these: a small kernel feels every microsecond
    def _expected(self) -> dict[tuple[bool, bool], tuple[tuple[str, np.dtype, tuple[int, ...], bool], ...]]:
        """Per (`arranged`, `bound`): (name, dtype, shape, is_output) of each array a call hands this kernel's
        program, in the declared layouts (`arranged` False) or in the kernel's; `bound`: but the constants
        and what the prologue computes from them (a `Prepared` holds them)."""
        held = {*self.constants, *self.handed}
        return {(arranged, bound): tuple((t.name, np.dtype(t.dtype), t.shape, t.is_output)
                                         for t in (self.module if arranged else self.operator.seed).tensors
                                         if not t.is_local and not (bound and t.name in held))
                for arranged in (False, True) for bound in (False, True)}

    @cached_property
    def _expected_names(self) -> dict[bool, frozenset[str]]:
        """Per `bound` (as `_expected`), the names of the arrays a call hands over: the same in both layouts."""
        return {bound: frozenset(name for name, *_ in self._expected[False, bound]) for bound in (False, True)}

    @cached_property  # read at every call of a model's layers
    def _own_layouts(self) -> dict[str, tuple[int, ...]]:
        return {t.name: t.layout for t in self.module.tensors if t.layout}

    @cached_property
    def layouts(self) -> dict[str, tuple[int, ...]]:
        """The memory layout this kernel keeps each tensor in, where it differs from the declared one:
        the declared axes in memory order (`array.transpose(axes)` arranges an array that way).
        A call converts at its boundary; `run_arranged` takes arrays already arranged."""
        if self.prologue is None:
            return self._own_layouts
        return {**{name: axes for name, axes in self._own_layouts.items() if name not in self.handed},
                **{name: self.prologue.layouts[name] for name in self.constants if name in self.prologue.layouts}}

    def _validate(self, arrays: Mapping[str, object], arranged: bool = False,
                  bound: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """`arrays` checked against the tensors they stand for (names, dtypes, shapes, C order, outputs
        writable and apart from the inputs), joined by `bound`: a `Prepared`'s constants, which it made
        (checked then, and copies: no argument overlaps them)."""
        expected = self._expected[arranged, bound is not None]
        # A name the kernel does not take is reported first (a misspelt name also leaves one missing);
        # looked for only where the names cannot all be right, since small kernels feel every microsecond.
        if arrays.keys() != self._expected_names[bound is not None]:
            names = [name for name, *_ in expected]
            unknown = sorted(set(arrays) - set(names))
            if unknown:
                raise ArgumentError(f"{self.operator.name} has no tensor {unknown[0]}; it takes {', '.join(names)}")
            missing = next(name for name in names if name not in arrays)
            raise ArgumentError(f"missing array for tensor {missing} (the kernel takes {', '.join(names)})")
        checked: dict[str, np.ndarray] = {}
        owners = True  # every array owns its memory: distinct ones cannot overlap (the common case, checked cheaply)
        for name, dtype, shape, is_output in expected:
            array = arrays[name]
            if type(array) is not np.ndarray:  # the test alone: a call of a small kernel feels each step
                array = as_array(array, f"tensor {name}")
            if array.dtype is not dtype and array.dtype != dtype:
                raise ArgumentError(
                    f"tensor {name} is {array.dtype}; this kernel takes {dtype} (convert with .astype(numpy.{dtype}))"
                )
            if array.shape != shape:
                raise ArgumentError(f"tensor {name} has shape {array.shape}; expected {shape}")
            flags = array.flags
            if not flags.c_contiguous:
                raise ArgumentError(f"tensor {name} is not C-contiguous; pass numpy.ascontiguousarray(...) of it")
            if is_output and not flags.writeable:
                raise ArgumentError(f"output tensor {name} is read-only")
            owners = owners and flags.owndata
            checked[name] = array
        if not (owners and len(set(map(id, checked.values()))) == len(checked)):
            for output in (name for name, *_, is_output in expected if is_output):
                for name, array in checked.items():
                    if name != output and np.shares_memory(array, checked[output]):
                        raise ArgumentError(f"output {output} shares memory with {name}; pass separate arrays")
        if bound:
            checked.update(bound)
        return checked

    def __call__(self, **arrays: np.ndarray) -> None:
        """Run on arrays in their declared layouts (outputs updated in place). With a prologue, it runs
        first, on the constants given (`prepare` runs it once for many calls)."""
        if self.prologue is None:
            self._call(arrays)
            return
        constants, rest = self._apart(arrays)
        self.prepare(**constants)(**rest)

    def run_arranged(self, **arrays: np.ndarray) -> None:
        """Run on arrays already in this kernel's memory layouts (`Kernel.layouts`): no conversion."""
        if self.prologue is None:
            self._run(self._validate(arrays, arranged=True))
            return
        constants, rest = self._apart(arrays)
        self._prepare(constants, arranged=True).run_arranged(**rest)

    def _apart(self, arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """`arrays` as (the constants, the others)."""
        constants = {name: array for name, array in arrays.items() if name in self.constants}
        return constants, {name: array for name, array in arrays.items() if name not in constants}

    def prepare(self, **constants: np.ndarray) -> Prepared:
        """Bind the constants (`compile(constants=...)`), in their declared layouts: run the prologue on
        them, once; the result runs the kernel on the other arrays. It keeps what it computed (or, without
        a prologue, a copy of the constants): later changes to the arrays given here do not reach it."""
        return self._prepare(constants, arranged=False)

    def _prepare(self, constants: Mapping[str, object], arranged: bool) -> Prepared:
        unknown = sorted(set(constants) - set(self.constants))
        if unknown:
            names = ", ".join(self.constants) or "none (compile with constants=[...] to bind inputs)"
            raise ArgumentError(f"{unknown[0]} is not a constant of {self.operator.name}; its constants are {names}")
        missing = [name for name in self.constants if name not in constants]
        if missing:
            raise ArgumentError(f"missing array for constant tensor {missing[0]}")
        if self.prologue is None:
            layouts = self.layouts if arranged else {}
            values = {name: np.array(as_array(array, f"tensor {name}"), copy=True) for name, array in constants.items()}
        else:  # the prologue's outputs, in its layouts where the constants come in them
            layouts = self.prologue.layouts if arranged else {}
            values = arranged_arrays(layouts, {name: np.zeros(shape, np.float32)
                                               for name, shape in self.prologue.shapes.items() if name in self.handed})
            (self.prologue.run_arranged if arranged else self.prologue)(**constants, **values)
        # Kept in the declared layouts (`Prepared` arranges them for `run_arranged` when first asked).
        declared = {name: value.transpose(inverse_axes(layouts[name])) if name in layouts else value
                    for name, value in values.items()}
        return Prepared(self, {name: np.ascontiguousarray(value) for name, value in declared.items()})

    def _call(self, arrays: Mapping[str, object], packed: Mapping[str, np.ndarray] | None = None,
              bound: Mapping[str, np.ndarray] | None = None, ready: Mapping[str, np.ndarray] | None = None) -> None:
        """Run this kernel's program on arrays in their declared layouts, with a `Prepared`'s constants
        (`bound`, declared layouts; `ready`, the same in this kernel's) and its `packed` tiles."""
        checked = self._validate(arrays, bound=bound)
        layouts = self._own_layouts
        if not layouts:
            self._run(checked, packed)
            return
        started = time.perf_counter()
        # Tensors kept in another layout are converted here; that time is reported apart.
        ready = ready or {}
        arranged = {
            name: ready[name] if name in ready else
            np.array(array.transpose(layouts[name]), order="C", copy=True) if name in layouts else array
            for name, array in checked.items()
        }
        converted = time.perf_counter() - started
        self._run(arranged, packed)
        started = time.perf_counter()
        for tensor in self.operator.seed.tensors:
            if tensor.is_output and tensor.name in layouts:
                checked[tensor.name][...] = arranged[tensor.name].transpose(inverse_axes(layouts[tensor.name]))
        self.report["layout_conversion_s"] = converted + time.perf_counter() - started

    def _run(self, checked: dict[str, np.ndarray], packed: Mapping[str, np.ndarray] | None = None) -> None:
        """Run the program on `checked` arrays in this kernel's layouts, with the locals it keeps and the
        arrays it arranged from the constants (`Program.prepack`: without them, the call arranges them)."""
        if self._locals is None:
            self._locals = {t.name: np.zeros(t.shape, t.dtype) for t in self.module.tensors if t.is_local}
        arrays = {**checked, **self._locals, **(packed or {})} if self._locals or packed else checked
        figures = self.program.run(arrays, threads=self.threads)
        if figures:  # the SW26010 simulator's counters; the host has none
            self.report.update(figures)

    def __repr__(self) -> str:
        return f"<swauto.Kernel {self.operator.name} {self.operator.params} {self.target} {self.schedule}>"


@dataclass
class Prepared:
    """A kernel with its constants bound (`Kernel.prepare`): call it with the other arrays, as the kernel."""

    kernel: Kernel
    values: dict[str, np.ndarray]  # what the kernel's program reads in place of the constants, declared layouts

    @cached_property
    def tensors(self) -> tuple[str, ...]:
        """The names of the arrays a call takes: the kernel's but its constants."""
        return tuple(name for name in self.kernel.tensors if name not in self.kernel.constants)

    @cached_property
    def _names(self) -> frozenset[str]:
        return frozenset(self.tensors)

    @cached_property
    def layouts(self) -> dict[str, tuple[int, ...]]:
        """The memory layouts of the arrays a call takes (`Kernel.layouts` of those)."""
        return {name: axes for name, axes in self.kernel.layouts.items() if name not in self.kernel.constants}

    @cached_property
    def _arranged(self) -> dict[str, np.ndarray]:
        return arranged_arrays(self.kernel._own_layouts, self.values)

    @cached_property
    def _packed(self) -> dict[str, np.ndarray]:
        """What the program arranges from the constants once (`Program.prepack`: the host's prepacked tiles)."""
        return self.kernel.program.prepack(self._arranged)

    def __call__(self, **arrays: np.ndarray) -> None:
        """Run on arrays in their declared layouts (outputs updated in place): only they are converted, the
        constants were arranged once."""
        self._check(arrays)
        self.kernel._call(arrays, self._packed, self.values, self._arranged)

    def run_arranged(self, **arrays: np.ndarray) -> None:
        """Run on arrays already in the kernel's memory layouts (`Kernel.layouts`): no conversion."""
        self._check(arrays)
        self.kernel._run(self.kernel._validate(arrays, arranged=True, bound=self._arranged), self._packed)

    def _check(self, arrays: Mapping[str, object]) -> None:
        """Refuse a constant or a name the kernel does not take (the kernel checks the rest)."""
        if arrays.keys() == self._names:  # the common case, told at once (a model makes a call per layer)
            return
        bound = sorted(set(arrays) & set(self.kernel.constants))
        if bound:
            raise ArgumentError(f"{bound[0]} is bound by prepare; prepare the kernel again to change it")
        unknown = sorted(set(arrays) - set(self.tensors))
        if unknown:
            raise ArgumentError(f"{self.kernel.operator.name} has no tensor {unknown[0]}; prepared, it takes "
                                f"{', '.join(self.tensors)}")

    def __repr__(self) -> str:
        return f"<swauto.Prepared {self.kernel!r} with {', '.join(self.kernel.constants)} bound>"


def arranged_arrays(layouts: Mapping[str, tuple[int, ...]], arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` (declared layouts) in `layouts` (a kernel's, `Kernel.layouts`), C-contiguous: a copy only
    where an array is not already so."""
    return {name: np.ascontiguousarray(array.transpose(layouts[name]) if name in layouts else array)
            for name, array in arrays.items()}
