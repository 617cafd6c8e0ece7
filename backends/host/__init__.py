"""The host backend: a final IR `Module` becomes LLVM IR (`codegen`, `microkernel`) with local buffers
in packed layouts (`layout`) and its outer loops split across threads (`parallel`); it is optimised
for this CPU's widest vector ISA (`isa`), cached on disk (`cache`), JIT-loaded (`jit`) and run on
NumPy arrays by a thread pool (`program`)."""

from .jit import Build, clear_cache, compile_module
from .knobs import Knobs
from .program import HostProgram, available_threads

__all__ = ["Build", "HostProgram", "Knobs", "available_threads", "clear_cache", "compile_module"]
