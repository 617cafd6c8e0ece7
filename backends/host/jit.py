"""JIT compilation for the host CPU: the LLVM IR of a `Module` is optimised at O3 for this CPU (or a
forced narrower instruction set) with LLVM's new pass manager, emitted as object code, stored in the
on-disk cache (`cache`) and loaded into an MCJIT engine. A kernel found on disk skips LLVM entirely.

Programs are also cached in the process per (module, instruction set, knobs, thread pool), keeping the
`CACHE_SIZE` most recently used ones.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

import llvmlite.binding as llvm

from swauto.errors import CodegenError
from swauto.ir.nodes import Module, fingerprint

from . import cache, threads
from . import isa as isas
from .codegen import generate, plan_kernel
from .knobs import Knobs, default_knobs
from .program import Build, HostProgram

# Each program holds about 1 MB (its machine code and per-thread workspaces).
CACHE_SIZE = 128

# llvmlite shares one LLVM context between threads and LLVM's is not thread-safe: every use of
# LLVM (and of the cache) happens under this lock.
_LLVM_LOCK = threading.Lock()
_CACHE: OrderedDict[tuple[Module, str, Knobs, bool], HostProgram] = OrderedDict()


def compile_module(module: Module, isa: str | None = None, knobs: Knobs | None = None) -> HostProgram:
    """The compiled program of `module` for instruction set `isa` (None: `$SWAUTO_HOST_ISA` or the
    widest the CPU has) and micro-kernel `knobs` (None: the ISA's default); from the process cache
    when compiled before, else from the disk cache, else compiled now.

    Raises `CodegenError` when the module cannot be lowered or LLVM fails on it.
    """
    chosen = isas.select(isa)
    knobs = knobs or default_knobs(chosen)
    if not knobs.fits(chosen):
        raise CodegenError(f"micro-kernel {knobs} does not fit the {chosen.width}-lane registers of {chosen.name}")
    entry = (module, chosen.name, knobs, threads.native())  # the native pool adds a function
    with _LLVM_LOCK:
        program = _CACHE.get(entry)
        if program is None:
            program = _build(module, chosen, knobs)
            _CACHE[entry] = program
            if len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
        else:
            _CACHE.move_to_end(entry)
        return program


def clear_cache() -> None:
    """Forget every program cached in this process (the disk cache stays; programs still referenced
    elsewhere stay usable)."""
    with _LLVM_LOCK:
        _CACHE.clear()


def _build(module: Module, isa: isas.Isa, knobs: Knobs) -> HostProgram:
    started = time.perf_counter()
    plan = plan_kernel(module, isa, knobs)
    cpu, _ = isas.host_cpu()
    features = isas.target_features(isa)
    # The plan (buffer layouts, views) depends on the caches' sizes too: it is part of the key.
    # The functions it has too ('parallel' only where the native thread pool runs). So do the sizes
    # themselves: the micro-kernel prefetches rows read in a tensor beyond the L2 (`prefetched_rows`).
    placement = repr((sorted(plan.layouts.items()), sorted(plan.offsets.items()), sorted(plan.views.items()),
                      sorted(plan.clipped.items()), sorted(plan.symbols), sorted(plan.prepacked.items()),
                      isas.cache_sizes()))
    key = cache.kernel_key(fingerprint(module), repr(knobs) + placement, isa.name, cpu, features)
    object_code = cache.load(key)
    from_disk = object_code is not None
    llvm_ir: str | None = None
    try:
        target_machine = _target_machine(cpu, features)
        if object_code is None:
            ir_module = generate(module, isa, knobs)
            llvm_module = llvm.parse_assembly(str(ir_module))
            llvm_module.triple = target_machine.triple
            llvm_module.data_layout = str(target_machine.target_data)
            llvm_module.verify()
            _optimise(llvm_module, target_machine)
            llvm_ir = str(llvm_module)
            object_code = target_machine.emit_object(llvm_module)
            cache.store(key, object_code, llvm_ir)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine)
        engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
        engine.finalize_object()
        addresses = {phase: engine.get_function_address(symbol) for phase, symbol in plan.symbols.items()}
    except Exception as error:  # llvmlite reports failures as RuntimeError and a few other types
        raise CodegenError(f"LLVM failed to compile kernel {module.name} for the host: {error}") from error
    missing = [symbol for phase, symbol in plan.symbols.items() if not addresses[phase]]
    if missing:
        raise CodegenError(f"the compiled kernel {module.name} has no function {missing[0]}")
    build = Build(key, from_disk, time.perf_counter() - started)
    return HostProgram(module, plan, engine, addresses, build, llvm_ir, isa.name, knobs, object_code)


def _optimise(llvm_module: llvm.ModuleRef, target_machine: llvm.TargetMachine) -> None:
    """Run LLVM's O3 pipeline, with the loop and SLP vectorizers, for `target_machine`."""
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = True
    builder = llvm.create_pass_builder(target_machine, options)
    builder.getModulePassManager().run(llvm_module, builder)


def _target_machine(cpu: str, features: str) -> llvm.TargetMachine:
    """A new target machine for this CPU with `features` (an MCJIT engine takes ownership of one)."""
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)
