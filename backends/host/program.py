"""A compiled host kernel and its runtime: per-thread workspaces and the thread pools.

A call runs, for each segment (`parallel.segments`), its 'before' phase on the calling thread and its
parallel nest's flattened iterations split into one contiguous range per thread; then 'after', or,
where it may (`parallel.Phases.alongside`), 'after' on the calling thread right after its own range,
which is shorter by the work 'after' does (`split_range`), while the other threads run theirs. On the
native pool (`threads`) that is one call into the kernel's 'parallel' function, which runs them all;
where it is not available, Python calls each phase and a Python pool runs the ranges (ctypes releases
the GIL while native code runs).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np

from swauto.errors import ArgumentError
from swauto.ir.nodes import Module

from . import cache
from . import threads as threads_module
from .codegen import Plan
from .codegen import phase as codegen_phase
from .knobs import Knobs


@dataclass(frozen=True)
class Build:
    """How a program was obtained: `from_disk` when the object code came from the disk cache, and the
    seconds spent (code generation, optimisation and emission, or loading)."""

    key: str
    from_disk: bool
    seconds: float


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def available_threads() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _forget_pool() -> None:
    """A forked child has none of its parent's threads: it starts a pool of its own when it needs one."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(available_threads(), 1), thread_name_prefix="swauto")
        return _POOL


@functools.lru_cache(maxsize=256)  # asked again at every call
def split_range(count: int, parts: int, head: int = 0) -> tuple[tuple[int, int], ...]:
    """`range(count)` cut into at most `parts` contiguous ranges, one per thread: `count + head` units cut as
    evenly as integers allow, the first `head` of them work the first thread does besides its range (the
    kernel's 'after' alongside: `parallel.Phases.alongside`), so its range is that much shorter, maybe
    empty. Without a head the ranges are non-empty and differ in length by at most 1."""
    units = count + head
    parts = max(1, min(parts, units))
    bounds = [max(0, units * p // parts - head) for p in range(parts + 1)]
    return tuple(zip(bounds, bounds[1:], strict=False))


@dataclass(frozen=True)
class Pooled:
    """A loop shared out on the Python pool: the calling thread's (workspace, lo, hi), the other threads'
    (none empty), and what the calling thread runs after its own range before it waits for theirs (the
    kernel's 'after' alongside them: `parallel.Phases.alongside`). The calling thread's range may then be
    empty: it still runs, for the prologue it fills, which 'after' reads."""

    own: tuple[int, int, int]
    others: tuple[tuple[int, int, int], ...]
    then: tuple[Callable[..., None], tuple[int, ...]] | None


# A function of a call and what it takes after the tensors' pointers, or how the Python pool shares it
# (`HostProgram._plan_steps`).
Step = tuple[Callable[..., None], tuple[int, ...] | Pooled]


class HostProgram:
    """A kernel compiled for the host CPU.

    The program owns its MCJIT engine, so its machine code lives exactly as long as the program
    object. `build` tells whether the code came from the disk cache and how long it took; `isa` and
    `knobs` what it was compiled for; `object_code` is the machine code loaded, its functions at
    `addresses` (by phase) in this process (what a profile of the kernel maps its samples back to).
    """

    def __init__(self, module: Module, plan: Plan, engine: llvm.ExecutionEngine, addresses: dict[str, int],
                 build: Build, llvm_ir: str | None, isa: str, knobs: Knobs, object_code: bytes) -> None:
        self.module, self.plan, self.build, self.isa, self.knobs = module, plan, build, isa, knobs
        self.object_code, self.addresses = object_code, dict(addresses)
        self._engine = engine
        self._llvm_ir = llvm_ir
        # Every phase takes the tensors, a workspace and a range of iterations; 'parallel' the tensors, an
        # array of workspaces (one per thread) and the threads.
        pointers = [ctypes.c_void_p] * (len(plan.arguments) + 1)
        phase = ctypes.CFUNCTYPE(None, *pointers, ctypes.c_int64, ctypes.c_int64)
        entry = ctypes.CFUNCTYPE(None, *pointers, ctypes.c_int64)
        self._functions = {name: (entry if name == "parallel" else phase)(address)
                           for name, address in addresses.items()}
        self._argument_names = plan.arguments
        self._packed_arguments = tuple(prepacked.argument for prepacked in plan.prepacked.values())
        # Arrays of prepacked tiles a call fills itself when not given them (`prepack`), kept for the next.
        self._own_packed: dict[str, np.ndarray] = {}
        self._workspaces: list[np.ndarray] = []
        self._workspace_addresses: list[int] = []  # each 64-byte aligned
        self._workspace_arrays: dict[int, ctypes.Array] = {}
        # Per segment: its 'before' and its 'loop' (None: none); what the threads share is in `plan.segments`.
        self._segments = [(self._functions[codegen_phase("before", index)],
                           self._functions.get(codegen_phase("loop", index)))
                          for index in range(len(plan.segments))]
        self._iterations = max(phases.iterations for phases in plan.segments)
        # Per thread count and whether this process is a fork, what a call runs in this thread (`_plan_steps`).
        self._steps: dict[tuple[int, bool], list[Step]] = {}
        # Workspaces are reused between calls: simultaneous calls of one program are serialised.
        self._run_lock = threading.Lock()

    @property
    def llvm_ir(self) -> str:
        """The optimised LLVM IR (read from the disk cache for a kernel loaded from there)."""
        if self._llvm_ir is None:
            self._llvm_ir = cache.load_ir(self.build.key)
        return self._llvm_ir

    @property
    def code(self) -> str:
        """The generated code, as every target's program names it: the optimised LLVM IR."""
        return self.llvm_ir

    @property
    def parallel_iterations(self) -> int:
        """How many independent iterations the threads share, in the segment with the most (0: the
        kernel runs on one thread)."""
        return self._iterations

    def prepack(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The arrays of prepacked tiles (`Plan.prepacked`), by name, filled from the constant tensors in
        `arrays` (the others are not read): given to `run` with the same constants, they spare it copying
        their tiles. Empty when the kernel has none."""
        packed = self._allocate()
        if packed:
            with self._run_lock:
                self._fill(arrays, packed)
        return packed

    def _allocate(self) -> dict[str, np.ndarray]:
        """Arrays for the prepacked tiles, 64-byte aligned as the workspaces, not filled."""
        packed = {}
        for prepacked in self.plan.prepacked.values():
            array = np.zeros(prepacked.size + 16, np.float32)
            start = -array.ctypes.data % 64 // 4
            packed[prepacked.argument] = array[start:start + prepacked.size]
        return packed

    def _fill(self, arrays: dict[str, np.ndarray], packed: dict[str, np.ndarray]) -> None:
        """Fill the arrays `packed` of prepacked tiles from the constant tensors in `arrays` (under the
        run lock: the function uses the first workspace)."""
        self._functions["prepack"](*(_address(arrays[name]) if name in arrays else _address(packed[name])
                                     if name in packed else None for name in self._argument_names),
                                   self._workspace_pointers(1)[0], 0, 0)

    def run(self, arrays: dict[str, np.ndarray], threads: int | None = None) -> None:
        """Run the kernel on `arrays` (by tensor name); outputs are updated in place. Where the kernel has
        prepacked tiles, `arrays` may hold their arrays (`prepack`, of the same constants); else the call
        fills them first.

        `threads` (default: every available core) is capped by the parallel iterations. The caller
        guarantees each array is C-contiguous float32 of its tensor's shape: the compiled code trusts
        the pointers it gets.
        """
        if threads is None:
            threads = available_threads()
        elif threads < 1:
            raise ArgumentError(f"threads must be a positive integer, got {threads}")
        # Called without the arrays of prepacked tiles, the call fills its own (kept for the next such call,
        # filled again there: its constants may differ), under the lock the run holds.
        own = self._packed_arguments and not all(name in arrays for name in self._packed_arguments)
        if own:
            if not self._own_packed:
                self._own_packed = self._allocate()
            arrays = {**arrays, **self._own_packed}
        pointers = [_pointer_at(id(array) + _DATA_OFFSET).value if type(array) is _READ_IN_PLACE else _address(array)
                    for array in map(arrays.__getitem__, self._argument_names)]
        forked = threads_module.forked()
        steps = self._steps.get((threads, forked))
        with self._run_lock:
            if steps is None:  # planned under the lock: it allocates the workspaces other calls share
                steps = self._plan_steps(threads, forked)
            if own:
                self._fill(arrays, self._own_packed)
            for function, tail in steps:
                if type(tail) is tuple:
                    function(*pointers, *tail)
                    continue
                futures = [_pool().submit(function, *pointers, *share) for share in tail.others]
                # The calling thread runs the first range itself (ctypes releases the GIL): one hand-over
                # fewer, which small kernels feel.
                if tail.own[1] < tail.own[2] or tail.then is not None:  # `then` reads what its prologue fills
                    function(*pointers, *tail.own)
                if tail.then is not None:
                    then, arguments = tail.then
                    then(*pointers, *arguments)
                for future in futures:
                    future.result()

    def _plan_steps(self, threads: int, forked: bool) -> list[Step]:
        """What a call on `threads` runs in the calling thread, in order, after the tensors' pointers: the
        native pool's one entry where the program has it ('parallel': every phase, each segment's
        'before' and 'loop' on the threads, 'after'), else each segment's 'before' and 'loop' (a
        `Pooled` where the Python pool shares it, with 'after' where that runs alongside) and 'after'.
        Planned once per thread count (a small kernel's call feels every microsecond); `forked`: this
        process is a fork, which cannot use libgomp's team (its threads did not survive the fork) and
        takes the Python pool."""
        ranges = [split_range(phases.iterations, threads, phases.head or 0) for phases in self.plan.segments]
        count = max(1, *map(len, ranges))
        workspaces = self._workspace_pointers(count)
        steps: list[Step] = []
        if "parallel" in self._functions and not forked:
            array = self._workspace_arrays.get(count)
            if array is None:
                array = self._workspace_arrays[count] = (ctypes.c_void_p * count)(*workspaces)
            steps.append((self._functions["parallel"], (ctypes.addressof(array), count)))
        else:
            after = (self._functions["after"], (workspaces[0], 0, 0)) if "after" in self._functions else None
            for (before, loop), phases, shares in zip(self._segments, self.plan.segments, ranges, strict=True):
                steps.append((before, (workspaces[0], 0, 0)))
                if loop is None:
                    continue
                shared = [(workspace, lo, hi) for workspace, (lo, hi) in zip(workspaces, shares, strict=False)]
                then = after if phases.alongside else None  # only the last segment has 'after'
                if len(shared) == 1 and then is None:
                    steps.append((loop, shared[0]))
                else:
                    steps.append((loop, Pooled(shared[0], tuple(s for s in shared[1:] if s[1] < s[2]), then)))
            if after is not None and not self.plan.segments[-1].alongside:
                steps.append(after)
        self._steps[(threads, forked)] = steps
        return steps

    def _workspace_pointers(self, count: int) -> list[int]:
        """Addresses of `count` 64-byte-aligned workspaces, allocated on first use and kept."""
        elements = self.plan.workspace_elements
        while len(self._workspaces) < count:
            array = np.zeros(elements + 16, np.float32)
            self._workspaces.append(array)
            self._workspace_addresses.append(array.ctypes.data + (-array.ctypes.data % 64))
        return self._workspace_addresses[:count]

    def __repr__(self) -> str:
        source = "disk cache" if self.build.from_disk else "compiled"
        return f"<HostProgram {self.module.name} {self.isa} {self.knobs} ({source} in {self.build.seconds:.3f} s)>"


def _data_offset() -> int:
    """Where a NumPy array object keeps the address of its data, from the object's own address: right
    after CPython's object header in NumPy's `PyArrayObject_fields`. Read there, an address takes 0.27 us
    (timeit), half the buffer protocol's 0.52 (`_address`) and a fifth of `array.ctypes.data`'s 1.5.
    Checked on a probe array against NumPy's own answer; 0 where it differs, or off CPython (where `id`
    is no address): `_address` then reads it through NumPy."""
    if sys.implementation.name != "cpython":
        return 0
    probe = np.zeros(1, np.float32)
    offset = object.__basicsize__
    return offset if _pointer_at(id(probe) + offset).value == probe.ctypes.data else 0


_pointer_at = ctypes.c_void_p.from_address
_DATA_OFFSET = _data_offset()
_READ_IN_PLACE = np.ndarray if _DATA_OFFSET else None  # arrays of exactly this type have it read at the offset


def _address(array: np.ndarray) -> int:
    """The address of `array`'s first element: through the buffer protocol where the array is writable
    (a third of the time `array.ctypes.data` takes, which a call of a small kernel feels three times
    over), else through NumPy."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):  # read-only, or a buffer ctypes does not take
        return array.ctypes.data
