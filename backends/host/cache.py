"""The on-disk cache of compiled host kernels (object code), shared by every process of a user.

A kernel's key hashes everything its machine code depends on: the IR's fingerprint, the host knobs,
the buffers' placement (which depends on the caches' sizes), the instruction set, the llvmlite and
LLVM versions, the CPU's name and feature string, and `CODEGEN_VERSION`, a hash of the backend's own
source, so any change to code generation changes every key. A changed compiler, backend or CPU
therefore never finds a stale kernel. Files are written atomically, so concurrent processes never
read a half-written one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from swauto.cache import cache_dir


def _source_hash() -> str:
    """A hash of the source of every module of this backend."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


CODEGEN_VERSION = _source_hash()


def kernel_key(fingerprint: str, knobs: str, isa: str, cpu: str, features: str) -> str:
    """The cache key of one kernel (hex)."""
    parts = [CODEGEN_VERSION, fingerprint, knobs, isa, cpu, features, llvmlite.__version__,
             ".".join(map(str, llvm.llvm_version_info))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _paths(key: str) -> tuple[Path, Path]:
    folder = cache_dir() / "host"
    return folder / f"{key}.o", folder / f"{key}.ll"


def load(key: str) -> bytes | None:
    """The object code stored under `key`, or None (also when the cache cannot be read)."""
    try:
        return _paths(key)[0].read_bytes()
    except OSError:
        return None


def load_ir(key: str) -> str:
    """The optimised LLVM IR stored with the object code of `key` ('' when missing)."""
    try:
        return _paths(key)[1].read_text()
    except OSError:
        return ""


def store(key: str, object_code: bytes, llvm_ir: str) -> None:
    """Store a kernel's object code and IR under `key`; a cache that cannot be written is skipped."""
    obj_path, ir_path = _paths(key)
    try:
        obj_path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(ir_path, llvm_ir.encode())
        _write_atomically(obj_path, object_code)  # last: its presence means the entry is complete
    except OSError:
        pass


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
