"""The native thread pool: the generated code shares a kernel's parallel iterations out through OpenMP's
runtime (GNU libgomp), so a call crosses from Python into native code once and no Python thread is
woken per range.

A kernel with a parallel group gets one more function, 'parallel' (`emit_parallel_entry`): its
arguments are the tensors' pointers, an array of per-thread workspace pointers and the number of
threads. It runs the whole call: for each segment (`parallel.segments`), its 'before' on the first
workspace, then, where more than one thread has iterations to run, `GOMP_parallel` on an outlined
function, in which each thread of the team runs the segment's 'loop' function on its own workspace and
its contiguous share of the iterations (the shares `program.split_range` makes), else 'loop' over
every iteration; at last 'after': once the last segment's threads are done, or, where it may run
alongside them (`parallel.Phases.alongside`), on the calling thread (the team's thread 0) right after
its own share, which is shorter by the last segment's `head`. So a call crosses from Python once, and an
operator of several statements shares each statement's nest. libgomp keeps its team between calls.

Where libgomp cannot be loaded, or `$SWAUTO_HOST_THREADS` is `python`, kernels are generated
without 'parallel' and the Python pool of `program` shares the ranges instead. libgomp's team does not
survive `fork`: a forked child uses the Python pool whatever the parent did.

Each worker of the team (not the calling thread) pins itself to one core on its first share: the
`k`-th worker to the `k`-th of the process's cores, counted from the one after the caller's core at
that moment. Why: a worker sleeps after a pause between calls, and the scheduler may wake it on the
caller's core (it did here, on a KVM guest, after 0.2 s idle); the caller then spins at the end of
the parallel region while the worker waits behind it for a scheduler tick. Two-thread GEMM 256³ took
4-8 ms per call instead of 0.17 for the first calls after each pause. The caller is left free, so the
user's thread keeps its affinity; libgomp's pool threads stay pinned for any other library in the
process that uses the same libgomp. Where the user asked libgomp to place threads (`OMP_PROC_BIND`,
`OMP_PLACES`, `GOMP_CPU_AFFINITY`), or the process may use one core, no worker pins itself; off Linux
(no `sched_setaffinity`) the code has no pinning at all.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

import llvmlite.binding as llvm
from llvmlite import ir

from .values import F32, I64

ENV_VAR = "SWAUTO_HOST_THREADS"  # "native" (the default where libgomp loads) or "python"
I32 = ir.IntType(32)
I8 = ir.IntType(8)
MAX_CPUS = 1024  # the cores a `cpu_set_t` names
MAX_WORKERS = 256  # team members that pin themselves (more share the others' cores unpinned)
PLACEMENT_SYMBOL = "swauto_worker_placement"
PLACEMENT_TYPE = ir.LiteralStructType([I32, ir.ArrayType(I32, MAX_CPUS), ir.ArrayType(I32, MAX_CPUS),
                                       ir.ArrayType(I8, MAX_WORKERS)])
USER_PLACEMENT = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")
PINS = hasattr(os, "sched_setaffinity")  # Linux: `sched_getcpu` and `sched_setaffinity` exist


class _Placement(ctypes.Structure):
    """The process's cores, read by the workers' first share (`PLACEMENT_TYPE` in the generated code)."""

    _fields_ = [("cores", ctypes.c_int32),  # how many (0: workers do not pin themselves)
                ("core", ctypes.c_int32 * MAX_CPUS),  # the k-th core's number
                ("position", ctypes.c_int32 * MAX_CPUS),  # a core number's k (-1: not the process's)
                ("pinned", ctypes.c_uint8 * MAX_WORKERS)]  # per team member: pinned already

_forked = False
_OPENED: list[ctypes.CDLL] = []  # libgomp, held open for the process's life (`_libgomp_loaded`)


def _after_fork() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork)


def forked() -> bool:
    """Whether this process is a fork of one that may have started a libgomp team (which the child
    cannot use: its threads did not survive the fork)."""
    return _forked


def native() -> bool:
    """Whether kernels share their iterations on the native pool: libgomp loads, the environment does
    not ask for the Python pool, and this process is not a fork of one that may have started a team."""
    if forked() or os.environ.get(ENV_VAR, "native") == "python":
        return False
    return _libgomp_loaded()


@functools.cache
def _libgomp_loaded() -> bool:
    """Load libgomp into the process, so the JIT resolves `GOMP_parallel`, and give the generated code
    the process's cores (once). ctypes opens it too and never closes it: at exit llvmlite closes the
    libraries it loaded, and a worker still spinning in libgomp (within its spin time after a call, or
    always with `OMP_WAIT_POLICY=active`) then ran on unmapped code: with that setting every process
    that had run a kernel on two threads ended in a segmentation fault."""
    path = ctypes.util.find_library("gomp")
    if path is None:
        return False
    try:
        _OPENED.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
        llvm.load_library_permanently(path)
    except (OSError, RuntimeError):
        return False
    if PINS:
        llvm.add_symbol(PLACEMENT_SYMBOL, ctypes.addressof(_placement()))
    return True


@functools.cache
def _placement() -> _Placement:
    """The process's cores as the workers read them (kept alive for the process: the code points at it)."""
    placement = _Placement()
    ctypes.memset(ctypes.addressof(placement.position), 0xFF, ctypes.sizeof(placement.position))
    cores = sorted(core for core in os.sched_getaffinity(0) if core < MAX_CPUS)
    if len(cores) > 1 and not any(os.environ.get(name) for name in USER_PLACEMENT):
        placement.cores = len(cores)
        for k, core in enumerate(cores):
            placement.core[k], placement.position[core] = core, k
    return placement


def _emit_pin_worker(builder: ir.IRBuilder, ir_module: ir.Module, thread: ir.Value, caller_core: ir.Value) -> None:
    """On team member `thread`'s (> 0) first share: pin it to the `thread`-th core after `caller_core`
    among the process's (see the module docstring)."""
    # Declared once per module: each segment's outlined function pins its workers.
    placement = ir_module.globals.get(PLACEMENT_SYMBOL) or ir.GlobalVariable(ir_module, PLACEMENT_TYPE,
                                                                             PLACEMENT_SYMBOL)
    set_affinity = ir_module.globals.get("sched_setaffinity") or ir.Function(
        ir_module, ir.FunctionType(I32, [I32, I64, I64.as_pointer()]), "sched_setaffinity")
    cores = builder.sext(builder.load(builder.gep(placement, [I32(0), I32(0)])), I64)
    is_worker = builder.and_(builder.icmp_signed(">", thread, I64(0)),
                             builder.icmp_signed("<", thread, I64(MAX_WORKERS)))
    with builder.if_then(builder.and_(is_worker, builder.icmp_signed(">", cores, I64(1)))):
        pinned = builder.gep(placement, [I32(0), I32(3), thread])
        with builder.if_then(builder.icmp_unsigned("==", builder.load(pinned), I8(0))):
            builder.store(I8(1), pinned)
            known = builder.icmp_unsigned("<", caller_core, I32(MAX_CPUS))
            index = builder.select(known, caller_core, I32(0))
            position = builder.load(builder.gep(placement, [I32(0), I32(2), index]))
            start = builder.sext(builder.select(known, position, I32(-1)), I64)  # -1: start from the first
            k = builder.srem(builder.add(start, thread), cores)
            core = builder.sext(builder.load(builder.gep(placement, [I32(0), I32(1), k])), I64)
            words = MAX_CPUS // 64
            mask = builder.alloca(ir.ArrayType(I64, words))
            for word in range(words):
                builder.store(I64(0), builder.gep(mask, [I32(0), I32(word)]))
            builder.store(builder.shl(I64(1), builder.and_(core, I64(63))),
                          builder.gep(mask, [I32(0), builder.lshr(core, I64(6))]))
            builder.call(set_affinity, [I32(0), I64(words * 8), builder.bitcast(mask, I64.as_pointer())])


def emit_parallel_entry(ir_module: ir.Module, segments: list[tuple[ir.Function, ir.Function, int, int | None]],
                        after: ir.Function, tensors: int, symbol: str) -> None:
    """Define `symbol` in `ir_module`: (tensor pointers..., workspace pointers, threads), which runs each
    of `segments` in turn, (before, loop, iterations, head): `before` on the first workspace, then `loop`
    on min(threads, iterations + head) threads of the OpenMP team, each on its own workspace and its share
    of the iterations (on one thread, directly); then `after`, or, where the last segment has a head
    (not None: `parallel.Phases.head`), `after` on thread 0 after its share, that share `head` iterations'
    worth of work shorter (see the module docstring)."""
    pointer = F32.as_pointer()
    # The tensors, the workspaces, the iterations and the caller's core.
    arguments = ir.LiteralStructType([ir.ArrayType(pointer, tensors), pointer.as_pointer(), I64, I32])
    bytes_pointer = ir.IntType(8).as_pointer()
    outlined_type = ir.FunctionType(ir.VoidType(), [bytes_pointer])
    gomp_parallel = ir.Function(ir_module, ir.FunctionType(ir.VoidType(), [outlined_type.as_pointer(),
                                                                           bytes_pointer, I32, I32]),
                                "GOMP_parallel")
    thread_number = ir.Function(ir_module, ir.FunctionType(I32, []), "omp_get_thread_num")
    team_size = ir.Function(ir_module, ir.FunctionType(I32, []), "omp_get_num_threads")
    current_core = ir.Function(ir_module, ir.FunctionType(I32, []), "sched_getcpu") if PINS else None

    def share(loop: ir.Function, index: int, alongside: int | None) -> ir.Function:
        """The function each thread of the team runs: its share of `loop`'s iterations; with `alongside`
        (the head), thread 0 then runs `after`."""
        outlined = ir.Function(ir_module, outlined_type, f"{symbol}_share{index}")
        outlined.linkage = "internal"
        builder = ir.IRBuilder(outlined.append_basic_block("entry"))
        packed = builder.bitcast(outlined.args[0], arguments.as_pointer())
        thread = builder.sext(builder.call(thread_number, []), I64)
        team = builder.sext(builder.call(team_size, []), I64)
        iterations = builder.load(builder.gep(packed, [I32(0), I32(2)]))
        if PINS:
            _emit_pin_worker(builder, ir_module, thread, builder.load(builder.gep(packed, [I32(0), I32(3)])))
        tensor_pointers = [builder.load(builder.gep(packed, [I32(0), I32(0), I32(position)]))
                           for position in range(tensors)]
        workspaces = builder.load(builder.gep(packed, [I32(0), I32(1)]))
        workspace = builder.load(builder.gep(workspaces, [thread]))
        # The shares `split_range` makes: thread t runs [max(0, (n + h) t / T - h), max(0, (n + h) (t + 1) / T - h)).
        units = builder.add(iterations, I64(alongside or 0))
        lo, hi = (builder.sub(builder.sdiv(builder.mul(units, part), team), I64(alongside or 0))
                  for part in (thread, builder.add(thread, I64(1))))
        lo, hi = (builder.select(builder.icmp_signed("<", bound, I64(0)), I64(0), bound) for bound in (lo, hi))
        runs = builder.icmp_signed("<", lo, hi)
        if alongside is not None:  # thread 0 runs its prologue even without iterations: `after` reads it
            runs = builder.or_(runs, builder.icmp_signed("==", thread, I64(0)))
        with builder.if_then(runs):
            builder.call(loop, [*tensor_pointers, workspace, lo, hi])
        if alongside is not None:
            with builder.if_then(builder.icmp_signed("==", thread, I64(0))):
                builder.call(after, [*tensor_pointers, workspace, I64(0), I64(0)])
        builder.ret_void()
        return outlined

    entry = ir.Function(ir_module, ir.FunctionType(ir.VoidType(), [pointer] * tensors
                                                   + [pointer.as_pointer(), I64]), symbol)
    entry.attributes.add("nounwind")
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    *tensor_arguments, workspaces, threads = entry.args
    packed = builder.alloca(arguments)
    for index, argument in enumerate(tensor_arguments):
        builder.store(argument, builder.gep(packed, [I32(0), I32(0), I32(index)]))
    builder.store(workspaces, builder.gep(packed, [I32(0), I32(1)]))
    first = builder.load(workspaces)
    for index, (before, loop, iterations, alongside) in enumerate(segments):
        builder.call(before, [*tensor_arguments, first, I64(0), I64(0)])
        units = I64(iterations + (alongside or 0))
        team = builder.select(builder.icmp_signed("<", threads, units), threads, units)
        with builder.if_else(builder.icmp_signed(">", team, I64(1))) as (shared, alone):
            with shared:
                builder.store(I64(iterations), builder.gep(packed, [I32(0), I32(2)]))
                if PINS:
                    builder.store(builder.call(current_core, []), builder.gep(packed, [I32(0), I32(3)]))
                builder.call(gomp_parallel, [share(loop, index, alongside), builder.bitcast(packed, bytes_pointer),
                                             builder.trunc(team, I32), I32(0)])
            with alone:
                builder.call(loop, [*tensor_arguments, first, I64(0), I64(iterations)])
                if alongside is not None:
                    builder.call(after, [*tensor_arguments, first, I64(0), I64(0)])
    if segments[-1][3] is None:  # the last segment's head: 'after' did not run beside its threads
        builder.call(after, [*tensor_arguments, first, I64(0), I64(0)])
    builder.ret_void()
