"""The native thread pool: the generated code shares a kernel's parallel iterations out through OpenMP's
runtime (GNU libgomp), so a call crosses from Python into native code once and no Python thread is
woken per range.

A kernel with a parallel group gets one more function, 'parallel' (`emit_parallel_entry`): its
arguments are the tensors' pointers, an array of per-thread workspace pointers, the group's iteration
count and the number of threads. It runs the whole call: 'before' on the first workspace, then, on more
than one thread, `GOMP_parallel` on an outlined function, in which each thread of the team runs the
'loop' function on its own workspace and its contiguous share of the iterations (the shares
`program.split_range` makes), else 'loop' over every iteration, then 'after'. So a call crosses from
Python once. libgomp keeps its team between calls.

Where libgomp cannot be loaded, or `$SWAUTO_HOST_THREADS` is `python`, kernels are generated
without 'parallel' and the Python pool of `program` shares the ranges instead. libgomp's team does not
survive `fork`: a forked child uses the Python pool whatever the parent did.
"""

from __future__ import annotations

import ctypes.util
import functools
import os

import llvmlite.binding as llvm
from llvmlite import ir

from .values import F32, I64

ENV_VAR = "SWAUTO_HOST_THREADS"  # "native" (the default where libgomp loads) or "python"
I32 = ir.IntType(32)

_forked = False


def _after_fork() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork)


def native() -> bool:
    """Whether kernels share their iterations on the native pool: libgomp loads, the environment does
    not ask for the Python pool, and this process is not a fork of one that may have started a team."""
    if _forked or os.environ.get(ENV_VAR, "native") == "python":
        return False
    return _libgomp_loaded()


@functools.cache
def _libgomp_loaded() -> bool:
    """Load libgomp into the process, so the JIT resolves `GOMP_parallel` (once)."""
    path = ctypes.util.find_library("gomp")
    if path is None:
        return False
    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return False
    return True


def emit_parallel_entry(ir_module: ir.Module, before: ir.Function, loop: ir.Function, after: ir.Function,
                        tensors: int, symbol: str) -> None:
    """Define `symbol` in `ir_module`: (tensor pointers..., workspace pointers, iterations, threads),
    which runs `before`, then `loop` on `threads` threads of the OpenMP team, each on its own workspace
    and its share of the iterations (on one thread, directly), then `after` (see the module docstring)."""
    pointer = F32.as_pointer()
    arguments = ir.LiteralStructType([ir.ArrayType(pointer, tensors), pointer.as_pointer(), I64])
    bytes_pointer = ir.IntType(8).as_pointer()
    outlined_type = ir.FunctionType(ir.VoidType(), [bytes_pointer])
    gomp_parallel = ir.Function(ir_module, ir.FunctionType(ir.VoidType(), [outlined_type.as_pointer(),
                                                                           bytes_pointer, I32, I32]),
                                "GOMP_parallel")
    thread_number = ir.Function(ir_module, ir.FunctionType(I32, []), "omp_get_thread_num")
    team_size = ir.Function(ir_module, ir.FunctionType(I32, []), "omp_get_num_threads")

    outlined = ir.Function(ir_module, outlined_type, f"{symbol}_share")
    outlined.linkage = "internal"
    builder = ir.IRBuilder(outlined.append_basic_block("entry"))
    packed = builder.bitcast(outlined.args[0], arguments.as_pointer())
    thread = builder.sext(builder.call(thread_number, []), I64)
    team = builder.sext(builder.call(team_size, []), I64)
    iterations = builder.load(builder.gep(packed, [I32(0), I32(2)]))
    # The shares `split_range` makes: thread t runs [n t / T, n (t + 1) / T).
    lo = builder.sdiv(builder.mul(iterations, thread), team)
    hi = builder.sdiv(builder.mul(iterations, builder.add(thread, I64(1))), team)
    with builder.if_then(builder.icmp_signed("<", lo, hi)):
        tensor_pointers = [builder.load(builder.gep(packed, [I32(0), I32(0), I32(index)])) for index in range(tensors)]
        workspaces = builder.load(builder.gep(packed, [I32(0), I32(1)]))
        workspace = builder.load(builder.gep(workspaces, [thread]))
        builder.call(loop, [*tensor_pointers, workspace, lo, hi])
    builder.ret_void()

    entry = ir.Function(ir_module, ir.FunctionType(ir.VoidType(), [pointer] * tensors
                                                   + [pointer.as_pointer(), I64, I64]), symbol)
    entry.attributes.add("nounwind")
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    *tensor_arguments, workspaces, iterations, threads = entry.args
    packed = builder.alloca(arguments)
    first = builder.load(workspaces)
    builder.call(before, [*tensor_arguments, first, I64(0), I64(0)])
    with builder.if_else(builder.icmp_signed(">", threads, I64(1))) as (shared, alone):
        with shared:
            for index, argument in enumerate(tensor_arguments):
                builder.store(argument, builder.gep(packed, [I32(0), I32(0), I32(index)]))
            builder.store(workspaces, builder.gep(packed, [I32(0), I32(1)]))
            builder.store(iterations, builder.gep(packed, [I32(0), I32(2)]))
            builder.call(gomp_parallel, [outlined, builder.bitcast(packed, bytes_pointer), builder.trunc(threads, I32),
                                         I32(0)])
        with alone:
            builder.call(loop, [*tensor_arguments, first, I64(0), iterations])
    builder.call(after, [*tensor_arguments, first, I64(0), I64(0)])
    builder.ret_void()
