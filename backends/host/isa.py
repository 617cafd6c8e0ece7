"""The vector instruction set the host kernels use: detected from the CPU, or forced.

`SWAUTO_HOST_ISA=avx512|avx2|generic` (or the `isa=` argument of `compile_module`) forces a narrower
set, so the AVX2 and generic code paths can be tested on an AVX-512 machine: the forced set also
switches the wider features off in LLVM's target, so no wider instruction is ever emitted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import llvmlite.binding as llvm

from swauto.errors import CodegenError

ENV_VAR = "SWAUTO_HOST_ISA"


@dataclass(frozen=True)
class Isa:
    """One instruction set: `width` float32 lanes per vector, `registers` vector registers, whether
    it has a fused multiply-add, and the LLVM features it must not use (switched off when forced)."""

    name: str
    width: int
    registers: int
    fma: bool
    disabled: tuple[str, ...]


_AVX512_FEATURES = ("avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi",
                    "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq", "avx512bf16", "avx512fp16",
                    "evex512")
_AVX_FEATURES = ("avx", "avx2", "fma", "fma4", "xop", "f16c", "vaes", "vpclmulqdq", "gfni", "avxvnni")

ISAS: dict[str, Isa] = {
    "avx512": Isa("avx512", 16, 32, True, ()),
    "avx2": Isa("avx2", 8, 16, True, _AVX512_FEATURES),
    # The x86-64 baseline (SSE2): 4 lanes, no FMA. On other CPUs, their own features at 4 lanes.
    "generic": Isa("generic", 4, 16, False, _AVX512_FEATURES + _AVX_FEATURES),
}


@cache
def host_cpu() -> tuple[str, dict[str, bool]]:
    """The host CPU's LLVM name and feature map, after initialising LLVM's native target once."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    try:
        features = dict(llvm.get_host_cpu_features())
    except RuntimeError:  # not every platform reports its features; the CPU name implies most
        features = {}
    return llvm.get_host_cpu_name(), features


def detect() -> Isa:
    """The widest instruction set this CPU runs."""
    _, features = host_cpu()
    if features.get("avx512f"):
        return ISAS["avx512"]
    if features.get("avx2") and features.get("fma"):
        return ISAS["avx2"]
    return ISAS["generic"]


def select(name: str | None = None) -> Isa:
    """The instruction set to compile for: `name`, else `$SWAUTO_HOST_ISA`, else the detected one.

    Raises `CodegenError` for an unknown name or one wider than the CPU supports.
    """
    name = name or os.environ.get(ENV_VAR) or None
    best = detect()
    if name is None:
        return best
    if name not in ISAS:
        raise CodegenError(f"unknown host instruction set {name!r}; choose one of {', '.join(ISAS)}")
    isa = ISAS[name]
    if isa.width > best.width:
        raise CodegenError(f"this CPU cannot run {name} code (its widest instruction set is {best.name})")
    return isa


def target_features(isa: Isa) -> str:
    """The LLVM feature string for `isa` on this CPU: the host's features, the disabled ones off."""
    _, features = host_cpu()
    merged = dict(features)
    for feature in isa.disabled:
        if feature in merged:
            merged[feature] = False
    if isa.name == "avx512":
        # LLVM tunes Intel's server cores (Skylake-SP to Emerald Rapids) to prefer 256-bit vectors, a
        # clock-speed hedge for mostly scalar code; the loop vectorizer then builds the maps' loops
        # at half width (seen on Emerald Rapids: <8 x float> on a 16-lane AVX-512 core).
        merged["prefer-256-bit"] = False
    return ",".join(f"{'+' if on else '-'}{name}" for name, on in sorted(merged.items()))


@cache
def cache_sizes() -> tuple[int, int, int]:
    """Per-core L1d and L2, and the L3, in bytes (from Linux's sysfs; Zen 4 sizes elsewhere)."""
    sizes = {1: 32 << 10, 2: 1 << 20, 3: 32 << 20}
    sizes.update({level: size for level, (size, _) in _sysfs_caches().items()})
    return sizes[1], sizes[2], sizes[3]


@cache
def l1_ways() -> int:
    """The L1d's associativity (from Linux's sysfs; a Zen 4's 8 elsewhere)."""
    return _sysfs_caches().get(1, (0, 0))[1] or 8


@cache
def l2_ways() -> int:
    """The L2's associativity: how many lines one of its sets holds (from Linux's sysfs; a Zen 4's 8
    elsewhere)."""
    return _sysfs_caches().get(2, (0, 0))[1] or 8


def _sysfs_caches() -> dict[int, tuple[int, int]]:
    """Per data cache level of core 0: (bytes, ways; 0 where sysfs does not say), as Linux's sysfs describes
    them (no level it lacks)."""
    found = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
            size = int(text.rstrip("KMG")) * scale
        except (OSError, ValueError):
            continue
        try:
            found[level] = (size, int((index / "ways_of_associativity").read_text()))
        except (OSError, ValueError):
            found[level] = (size, 0)
    return found
