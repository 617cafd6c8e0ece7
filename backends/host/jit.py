"""JIT compilation for the host CPU: the LLVM IR of a `Module` is optimised at O3 for this CPU with
LLVM's new pass manager, compiled with MCJIT and called through ctypes on NumPy arrays.

Compiled programs are cached per `Module` (a frozen dataclass, so equal IR hits the same entry),
keeping the `CACHE_SIZE` most recently used ones.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from functools import cache

import llvmlite.binding as llvm
import numpy as np

from swauto.errors import CodegenError
from swauto.ir.nodes import Module

from .codegen import function_name, generate

# Each program holds about 1 MB (its LLVM module, machine code and local buffers).
CACHE_SIZE = 128

# llvmlite shares one LLVM context between threads and LLVM's is not thread-safe: every use of
# LLVM (and of the cache) happens under this lock.
_LLVM_LOCK = threading.Lock()
_CACHE: OrderedDict[Module, HostProgram] = OrderedDict()


class HostProgram:
    """A kernel compiled for the host CPU.

    `llvm_ir` is the optimised LLVM IR text. The program owns its MCJIT engine, so its machine code
    lives exactly as long as the program object.
    """

    def __init__(self, module: Module, llvm_ir: str, engine: llvm.ExecutionEngine, address: int) -> None:
        self.module = module
        self.llvm_ir = llvm_ir
        self._engine = engine
        signature = ctypes.CFUNCTYPE(None, *(ctypes.c_void_p for _ in module.tensors))
        self._function = signature(address)
        # The local buffers are globals of the compiled code: two simultaneous runs would share them.
        self._run_lock = threading.Lock()

    def run(self, arrays: dict[str, np.ndarray]) -> None:
        """Run the kernel on `arrays`, keyed by tensor name; outputs are updated in place.

        The caller guarantees each array is C-contiguous float32 of its tensor's shape: the compiled
        code trusts the pointers it gets. Runs of one program are serialised; ctypes releases the GIL.
        """
        pointers = [arrays[tensor.name].ctypes.data for tensor in self.module.tensors]
        with self._run_lock:
            self._function(*pointers)

    def __repr__(self) -> str:
        return f"<HostProgram {self.module.name} ({len(self.llvm_ir)} characters of LLVM IR)>"


def compile_module(module: Module) -> HostProgram:
    """The compiled program of `module`, from the cache when an equal module was compiled before.

    Raises `CodegenError` when the module cannot be lowered or LLVM fails on it.
    """
    with _LLVM_LOCK:
        program = _CACHE.get(module)
        if program is None:
            program = _compile(module)
            _CACHE[module] = program
            if len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
        else:
            _CACHE.move_to_end(module)
        return program


def clear_cache() -> None:
    """Forget every cached program (programs still referenced elsewhere stay usable)."""
    with _LLVM_LOCK:
        _CACHE.clear()


def _compile(module: Module) -> HostProgram:
    ir_module = generate(module)
    name = function_name(module)
    try:
        target_machine = _host_target_machine()
        llvm_module = llvm.parse_assembly(str(ir_module))
        llvm_module.triple = target_machine.triple
        llvm_module.data_layout = str(target_machine.target_data)
        llvm_module.verify()
        _optimise(llvm_module, target_machine)
        llvm_ir = str(llvm_module)
        engine = llvm.create_mcjit_compiler(llvm_module, target_machine)  # owns both from here on
        engine.finalize_object()
        address = engine.get_function_address(name)
    except Exception as error:  # llvmlite reports failures as RuntimeError and a few other types
        raise CodegenError(f"LLVM failed to compile kernel {module.name} for the host: {error}") from error
    if not address:
        raise CodegenError(f"LLVM compiled kernel {module.name} but its function {name} has no address")
    return HostProgram(module, llvm_ir, engine, address)


def _optimise(llvm_module: llvm.ModuleRef, target_machine: llvm.TargetMachine) -> None:
    """Run LLVM's O3 pipeline, with the loop and SLP vectorizers, for `target_machine`."""
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = True
    builder = llvm.create_pass_builder(target_machine, options)
    builder.getModulePassManager().run(llvm_module, builder)


def _host_target_machine() -> llvm.TargetMachine:
    """A new target machine for this CPU and its features (an MCJIT engine takes ownership of one)."""
    cpu, features = _host_cpu()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)


@cache
def _host_cpu() -> tuple[str, str]:
    """The host CPU's name and feature string, after initialising LLVM's native target once."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # not every platform reports its features; the CPU name implies most
        features = ""
    return llvm.get_host_cpu_name(), features
