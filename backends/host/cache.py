"""The on-disk cache of compiled host kernels (object code), shared by every process of a user.

A kernel's key hashes everything its machine code depends on: the IR's fingerprint, the host knobs, the
buffers' placement and the caches' sizes (on which the placement and the micro-kernel's prefetches
depend), the instruction set, the llvmlite and LLVM versions, the CPU's name and feature string, and
`CODEGEN_VERSION`, a hash of the backend's own source, so any change to code generation changes every
key. A changed compiler, backend or CPU therefore never finds a stale kernel. Files are written
atomically and durably, so concurrent processes never read a half-written one; each starts with a header
holding its key and checksum, so a damaged or foreign file is recompiled and rewritten (with a
`CacheWarning`) instead of crashing LLVM.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from swauto.cache import cache_dir, warn_once, warn_unusable, write_atomically


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


# An entry's file is this header, then its payload: the header names the file's kind and key and holds the
# payload's length and SHA-256, so an emptied, truncated, bit-flipped or foreign file (every GEMM kernel
# exports the same symbols: another kernel's object would load without complaint) is never handed to
# LLVM, which crashes the process on a bad object.
_MAGIC = b"swauto-kernel-cache 1"


def _seal(kind: str, key: str, payload: bytes) -> bytes:
    digest = hashlib.sha256(payload).hexdigest()
    return b"%s %s %s %d %s\n" % (_MAGIC, kind.encode(), key.encode(), len(payload), digest.encode()) + payload


def _unseal(kind: str, key: str, data: bytes) -> bytes:
    """The payload of `data`, a file sealed for `kind` and `key`. Raises ValueError saying what is wrong."""
    header, newline, payload = data.partition(b"\n")
    fields = header.split(b" ")
    if not newline or len(fields) != 6 or b" ".join(fields[:2]) != _MAGIC:
        raise ValueError("no swauto header")
    if fields[2] != kind.encode() or fields[3] != key.encode():
        raise ValueError("it belongs to another kernel")
    if fields[4] != str(len(payload)).encode() or fields[5] != hashlib.sha256(payload).hexdigest().encode():
        raise ValueError("its contents are damaged")
    return payload


def _read(kind: str, key: str, path: Path) -> bytes | None:
    """The payload stored at `path`, or None when missing, unreadable or damaged (said once, as a warning)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        warn_unusable(error)
        return None
    try:
        return _unseal(kind, key, data)
    except ValueError as reason:
        warn_once("damaged", path, f"swauto's cached kernel {path} is unusable ({reason}); compiling it again")
        return None


def load(key: str) -> bytes | None:
    """The object code stored under `key`, or None: when there is none, when the cache cannot be read, or when
    the entry (object or IR) is not exactly what `store` wrote for `key`; the caller then compiles again and
    stores, which rewrites the entry."""
    obj_path, ir_path = _paths(key)
    object_code = _read("object", key, obj_path)
    if object_code is None or _read("ir", key, ir_path) is None:
        return None
    return object_code


def load_ir(key: str) -> str:
    """The optimised LLVM IR stored with the object code of `key` ('' when missing or damaged)."""
    llvm_ir = _read("ir", key, _paths(key)[1])
    return "" if llvm_ir is None else llvm_ir.decode("utf-8", "replace")


def store(key: str, object_code: bytes, llvm_ir: str) -> None:
    """Store a kernel's object code and IR under `key`, each file atomically and durably; a cache that cannot
    be written is skipped (said once, as a warning)."""
    obj_path, ir_path = _paths(key)
    try:
        write_atomically(ir_path, _seal("ir", key, llvm_ir.encode()))
        write_atomically(obj_path, _seal("object", key, object_code))
    except OSError as error:
        warn_unusable(error)
