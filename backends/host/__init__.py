"""The host backend: a final IR `Module` becomes LLVM IR (`codegen`), which is optimised for this CPU,
JIT-compiled with MCJIT and run on NumPy arrays (`jit`)."""

from .jit import HostProgram, clear_cache, compile_module

__all__ = ["HostProgram", "clear_cache", "compile_module"]
