"""Machine descriptions: every constant of the targets, in one place (thesis chapters 3 and 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from swauto import targets

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
    # The mesh GEMM primitive has one fixed register blocking (4 x 16 per CPE): no choice to explore.
    micro_kernels: tuple[tuple[int, int], ...] = ()
    # DMAs run asynchronously beside the CPEs' compute: double buffering can hide them.
    asynchronous_dma: bool = True
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

    # --- timed simulation (backends/sw26010/timing.py; issue 4) ---------------------------------
    # DMA engine: besides the memory controller (128-byte transactions at peak_bandwidth), every block a
    # CPE moves costs a fixed overhead plus its bytes over the mesh's transfer network. These two were
    # fitted to the measured table ../shared/data/sw26010_dma_bandwidth.csv (64 B - 1 KB blocks, least
    # absolute % error, 200-cycle latency included) by `benchmarks/sw26010_dma_bandwidth.py --fit`.
    dma_block_overhead_cycles: float = 3.5
    dma_network_bandwidth: float = 26.25e9
    # Cycles a CPE spends issuing one DMA descriptor (assumption: a handful of P1 instructions).
    dma_issue_cycles: int = 8
    # The GEMM primitive's instruction schedule (thesis 4.1.2-4.1.3, listing 4.1, table 3.2): register
    # blocks of 16 (vectorized dimension) x 4 (other) per CPE, 16 VMADs (4-wide FMA) in 16 cycles.
    gemm_register_block_vectorized: int = 16
    gemm_register_block_other: int = 4
    vector_lanes: int = 4
    vmad_latency_cycles: int = 7
    vector_load_latency_cycles: int = 4
    register_comm_latency_cycles: int = 11
    sync_cycles: int = 14
    # Single <-> double conversion in LDM: one P1 vector instruction per 4 elements (assumption,
    # calibrated so that the best primitive call reaches the thesis' ~97% of peak).
    gemm_conversion_cycles_per_element: float = 0.25
    # Entering and leaving the primitive: argument set-up, a mesh-wide synchronisation (assumption).
    gemm_call_overhead_cycles: int = 128
    # Entering and leaving an element-wise map or reduction: argument set-up and a mesh-wide
    # synchronisation (assumption: a quarter of the GEMM's, which also converts and broadcasts).
    map_call_overhead_cycles: int = 32
    # Zeroing local memory: one 4-wide vector store per cycle per CPE.
    zero_elements_per_cycle: int = 4

    # --- the thesis' analytic model (swauto/tuner/sw26010_model.py) ----------------------------------
    # Measured DMA bandwidth (MB/s) of one core group whose 64 CPEs each move a block of 16, 32, ...,
    # 4080 bytes: run 2 of ../shared/data/sw26010_dma_bandwidth.csv (from swGEMM's MBW_map, which its
    # implementation of the thesis' model divides by instead of PEAK_BW), rounded to 1 MB/s. Each entry
    # times one mesh-wide DMA from issue to completion, so it includes one start latency
    # (dma_latency_cycles); the model charges that latency once per transfer, not once per 64 blocks.
    dma_measured_mbps: tuple[int, ...] = (
        3390, 6033, 9181, 11876, 13767, 10087, 10523, 13365, 14134, 16452, 17314, 19446, 19997, 10186, 16442, 17509,
        18274, 19345, 19300, 20966, 20429, 18137, 18710, 19885, 20117, 21051, 21009, 12402, 22579, 19771, 20369,
        21030, 21638, 22161, 22898, 23053, 22214, 18107, 21088, 21992, 22231, 18907, 22901, 23413, 23620, 21629,
        21917, 22202, 22933, 23259, 23629, 24179, 24569, 22159, 22024, 21704, 22001, 23542, 23898, 24653, 24752,
        22705, 22908, 23677, 23608, 24061, 24265, 24463, 24885, 22664, 23200, 23772, 23822, 23878, 24193, 24365,
        24848, 23300, 23664, 23730, 24297, 24190, 24189, 24159, 24807, 23511, 23840, 24218, 24235, 24448, 24828,
        25148, 25310, 23574, 23647, 23984, 24372, 24844, 24925, 25110, 25379, 23925, 24215, 24551, 24588, 24818,
        25052, 25338, 25317, 24100, 24159, 24437, 23581, 24540, 24686, 24942, 25381, 24163, 24271, 24741, 24684,
        24816, 25080, 25462, 25447, 23707, 23754, 24642, 24930, 25200, 25365, 25548, 25656, 24630, 24703, 24874,
        24807, 25210, 24867, 24863, 25700, 24607, 24904, 24893, 25083, 25196, 25277, 25602, 24222, 24872, 24891,
        24978, 24897, 24061, 25350, 25540, 25816, 24777, 25126, 24797, 25261, 25498, 25511, 25738, 25644, 24911,
        24659, 25004, 25064, 25410, 25567, 26173, 25682, 24768, 25034, 25204, 25142, 25420, 25580, 25676, 25702,
        25408, 24874, 25332, 25431, 24968, 24645, 25573, 25950, 25004, 25082, 25334, 25365, 25559, 25915, 25814,
        25804, 25249, 25130, 25357, 25371, 25617, 25525, 25743, 25208, 25129, 25233, 25451, 25447, 25710, 25743,
        25949, 25412, 25397, 25393, 25511, 25636, 25447, 25925, 25914, 25231, 25107, 23748, 25196, 24578, 25139,
        25759, 25726, 25259, 25432, 25490, 25511, 25539, 25747, 25806, 25706, 25156, 25206, 25381, 25307, 25506,
        25770, 25684, 25912, 24692, 25299, 25432, 25418, 25702, 25772, 24928, 26052, 25050, 25460, 25445,
    )
    dma_measured_block_step: int = 16
    # GEMM primitive time a*K + b*K*M/(vecM*4) + c*K*M*N/4 + d (equation 4-2), in seconds, M the
    # vectorized dimension, plus e*M*N in the refined model (the per-block fill of C's registers and
    # the conversions of C, which the primitive's schedule has and equation 4-2 has no term for: a
    # call of short K is mostly that). Both fitted by least squares to the timed simulator's primitive
    # timings by `benchmarks/sw26010_gemm_fit.py` (the thesis fitted 1505 hardware timings: c =
    # 3.10e-12 s there). `gemm_equation` says which the model uses: "refined" (a, b, c, d, e) or "4-2"
    # (the thesis' four terms, fitted on their own: `gemm_fit_eq42`). Fits of 2026-11-25 over 9770
    # sizes: refined, relative error mean 0.13%, max 0.51%; equation 4-2, mean 3.9%, max 75% (short K).
    gemm_fit: tuple[float, float, float, float, float] = (1.45146e-10, 1.29694e-10, 1.08277e-11, 2.28531e-07,
                                                          2.00889e-11)
    gemm_fit_eq42: tuple[float, float, float, float] = (-1.91782e-09, 4.32508e-11, 1.15299e-11, 6.23393e-07)
    gemm_equation: Literal["refined", "4-2"] = "refined"

    @property
    def cpes(self) -> int:
        return self.mesh_rows * self.mesh_columns

    @property
    def ldm_usable_bytes(self) -> int:
        return self.ldm_bytes - self.ldm_reserve_bytes


# The host micro-kernel's default register tiles (rows, vectors) per instruction set, the default first:
# a kernel compiled without a chosen tile gets it, and calibration measures these among its choices
# (`backends/host/knobs.register_tile_choices`); the space explores the tiles measured fastest on the
# machine at hand (`host_model.Machine.register_tiles`). Rows x vectors accumulators, one register per
# vector of the vector operand and one broadcast register must fit the register file (AVX-512: 32
# registers; AVX2 and SSE: 16). On a Zen 4, 4 x 4 and 6 x 4 won most whole GEMMs (benchmarks/host_tuning.py).
HOST_MICRO_KERNELS: dict[str, tuple[tuple[int, int], ...]] = {
    "avx512": ((4, 4), (6, 4)),
    "avx2": ((4, 2), (6, 2)),
    "generic": ((4, 2), (6, 2)),
}


@dataclass(frozen=True)
class HostScratchpad:
    """The host as the scheduler and the passes see it: the tile buffers of one core and a primitive
    (the micro-kernel) that takes any size, computing in single precision. The SW26010's constraints
    and its float64 copies do not apply. The host has no hard local-memory limit; the bound keeps a
    core's buffers within a few times its L2 (the host target reads the CPU's: `L2_MULTIPLE` x L2,
    4 MiB where L2 is 1 MiB) while still admitting a whole 512 x 512 weight slice (1 MiB)."""

    L2_MULTIPLE: ClassVar[int] = 4
    cpes: int = 1
    ldm_bytes: int = 4 * 1024 * 1024
    ldm_reserve_bytes: int = 0
    gemm_compute_dtype: str = "float32"
    gemm: GemmConstraints = GemmConstraints(vectorized_multiple=1, other_multiple=1, k_multiple=1)
    # Register tiles of the micro-kernel to explore (the calibration's fastest for the instruction set
    # the kernels are compiled for); none: the backend uses its default.
    micro_kernels: tuple[tuple[int, int], ...] = ()
    # A "DMA" is a packing copy the core runs itself: double buffering has nothing to overlap it with,
    # so the space leaves it out (the backend still runs double-buffered IR it is given).
    asynchronous_dma: bool = False

    @property
    def ldm_usable_bytes(self) -> int:
        return self.ldm_bytes - self.ldm_reserve_bytes


class LocalMemoryMachine(Protocol):
    """What the scheduler and the passes need of a target: its local memory and its primitive."""

    @property
    def cpes(self) -> int: ...

    @property
    def ldm_usable_bytes(self) -> int: ...

    @property
    def gemm_compute_dtype(self) -> str: ...

    @property
    def gemm(self) -> GemmConstraints: ...

    @property
    def micro_kernels(self) -> tuple[tuple[int, int], ...]: ...

    @property
    def asynchronous_dma(self) -> bool: ...


SUNWAY = SW26010()


def local_memory_machine(target: str) -> LocalMemoryMachine:
    """The machine description the scheduler uses for `target` (its registered `swauto.targets.Target`'s;
    the host's explores the register tiles of the instruction set its kernels are compiled for)."""
    return targets.get(target).machine()
