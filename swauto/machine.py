"""Machine descriptions: every constant of the targets, in one place (thesis chapters 3 and 4)."""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float64": 8}


@dataclass(frozen=True)
class GemmConstraints:
    """Sizes the SW26010 mesh GEMM primitive accepts (thesis 4.1.2 and 4.2.4; swGEMM: M x128, N x32, K x8).

    Register blocking (4 x 16 per CPE, 8 x 8 CPEs) makes the vectorized free dimension a multiple of 128
    and the other one a multiple of 32; K steps by 8 (one block per CPE column).
    """

    vectorized_multiple: int = 128
    other_multiple: int = 32
    k_multiple: int = 8

    def violation(self, m: int, n: int, k: int, vectorize: str) -> str | None:
        """Why gemm(M=m, N=n, K=k) vectorized over `vectorize` is not a legal call, or None."""
        sizes = {"M": m, "N": n}
        other = "N" if vectorize == "M" else "M"
        if sizes[vectorize] % self.vectorized_multiple:
            return f"vectorized dimension {vectorize} not a multiple of {self.vectorized_multiple}"
        if sizes[other] % self.other_multiple:
            return f"free dimension {other} not a multiple of {self.other_multiple}"
        if k % self.k_multiple:
            return f"K not a multiple of {self.k_multiple}"
        return None


@dataclass(frozen=True)
class SW26010:
    """One core group of the Sunway SW26010 (the unit a kernel runs on): 1 MPE + an 8 x 8 CPE mesh."""

    core_groups_per_chip: int = 4
    mesh_rows: int = 8
    mesh_columns: int = 8
    clock_hz: float = 1.45e9
    # Local memory (LDM) of one CPE; the reserve holds the stack and the primitive's bookkeeping.
    ldm_bytes: int = 64 * 1024
    ldm_reserve_bytes: int = 4 * 1024
    # Peak of one core group: 64 CPEs x 4-wide double FMA (8 flops) x 1.45 GHz.
    peak_flops: float = 742.4e9
    # Memory bandwidth of one core group: 33.6 GB/s theoretical, 30.94 GB/s measured (PEAK_BW).
    theoretical_bandwidth: float = 33.6e9
    peak_bandwidth: float = 30.94e9
    dma_transaction_bytes: int = 128
    dma_latency_cycles: int = 200
    # Single-precision operands are converted to double inside LDM before the primitive runs
    # (thesis 4.1.3, strategy 2): every GEMM operand also needs a float64 copy in local memory.
    gemm_compute_dtype: str = "float64"
    gemm: GemmConstraints = GemmConstraints()

    @property
    def cpes(self) -> int:
        return self.mesh_rows * self.mesh_columns

    @property
    def ldm_usable_bytes(self) -> int:
        return self.ldm_bytes - self.ldm_reserve_bytes


@dataclass(frozen=True)
class Host:
    """The development machine's figures (DEVELOPERS.md: AMD Zen 4, AVX-512), used by the first,
    rough host cost; the fast-host-backend work replaces them by a per-machine micro-benchmark."""

    peak_flops_per_core: float = 117e9
    memory_bandwidth: float = 20e9
    # float32 lanes of one vector FMA (AVX-512); a primitive whose vectorized dimension is not the
    # contiguous axis of its output runs scalar, this many times slower.
    vector_lanes: int = 16


SUNWAY = SW26010()
HOST = Host()
