"""JIT compilation for the host CPU: the LLVM IR of a `Module` is optimised at O3 for this CPU with
LLVM's new pass manager, compiled with MCJIT and called through ctypes on NumPy arrays.

Compiled programs are cached per `Module` (a frozen dataclass, so equal IR hits the same entry),
keeping the most recently used `CACHE_SIZE` of them.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from functools import cache

import llvmlite.binding as llvm
import numpy as np

from backends_host_codegen_placeholder import function_name, generate  # replaced below
