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
    # The primitive vectorizes the free dimension the schedule chooses.
    vector_dim_from_layout: bool = False
    # DMAs run asynchronously beside the CPEs' compute: double buffering can hide them.
    asynchronous_dma: bool = True
    # GEMMs whose factor is a tile of zero padding alone run anyway (`swauto.passes.guard_padding`): the
    # mesh could skip them too, but the thesis' model and every SW26010 result here price them.
    skips_zero_tiles: bool = False
    # No cache between local memory and memory: a transfer's bytes cost the same wherever its buffer ends.
    cache_bytes: int = 0
    # The mesh GEMM adds into its C tile: a tile it overwrites is zeroed first (`swauto.passes.fold_zeros`
    # does not run).
    folds_zeros: bool = False
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
    # An exchanged transfer (`swauto.passes.exchange_transfers`): the CPEs of each mesh row pass the
    # pieces of the runs they moved to the CPEs the mesh layout gives them over the row register
    # network, one 256-bit vector at a time (thesis 3.1.4). Per vector a CPE loads, puts, gets and
    # stores: four P1 instructions (assumption), after the network's latency and a synchronisation.
    register_vector_bytes: int = 32
    exchange_instructions_per_vector: int = 4
    # A transfer is exchanged where the measured table below gives its data-parallel blocks at least
    # this much more bandwidth than its mesh pieces: the exchange costs about 3% of the transfer's time
    # at full bandwidth (4 instructions per 32 bytes per CPE against the 64 CPEs' 17 bytes per cycle).
    exchange_min_gain: float = 1.1

    # --- the thesis' analytic model (swauto/tuner/sw26010_model.py) ----------------------------------
    # DMA bandwidth (MB/s) of one core group whose 64 CPEs each move a block of 16, 32, ..., 4080 bytes,
    # measured on the machine the code runs on, as the thesis measured it on the chip: here the timed
    # simulator (`backends.sw26010.timing.dma_table`, printed by `benchmarks/sw26010_dma_bandwidth.py
    # --table`; a test checks it is current). Each entry times one mesh-wide DMA from issue to completion,
    # so it includes one start latency (dma_latency_cycles); the model charges that latency once per
    # transfer, not once per 64 blocks. The chip's own table (../shared/data/sw26010_dma_bandwidth.csv,
    # which swGEMM's implementation of the model divides by) is what the simulator's DMA engine is fitted
    # to, but entry by entry it is noisy: at 64-byte blocks it is 30% faster than the simulator, which
    # made the model's pick 3.3% slower than the simulator's best on ResNet-50 res3_1x1c at B = 32.
    dma_measured_mbps: tuple[int, ...] = (
        2543, 5086, 6552, 9134, 9569, 11482, 11921, 13552, 13807, 15003, 15353, 16157, 16643, 17096, 17503, 17875,
        18217, 18532, 18824, 19094, 19345, 19579, 19798, 20003, 20195, 20376, 20546, 20707, 20858, 21002, 21139,
        21268, 21391, 21508, 21620, 21726, 21828, 21925, 22018, 22107, 22193, 22275, 22353, 22429, 22502, 22572,
        22639, 22704, 22767, 22828, 22886, 22943, 22997, 23050, 23101, 23151, 23199, 23246, 23291, 23335, 23377,
        23419, 23459, 23498, 23536, 23573, 23609, 23644, 23678, 23711, 23743, 23775, 23806, 23836, 23865, 23893,
        23921, 23949, 23975, 24001, 24027, 24051, 24076, 24099, 24123, 24145, 24168, 24190, 24211, 24232, 24252,
        24272, 24292, 24311, 24330, 24349, 24367, 24385, 24402, 24420, 24436, 24453, 24469, 24485, 24501, 24516,
        24531, 24546, 24561, 24575, 24589, 24603, 24617, 24630, 24644, 24657, 24669, 24682, 24694, 24707, 24719,
        24731, 24742, 24754, 24765, 24776, 24787, 24798, 24808, 24819, 24829, 24839, 24849, 24859, 24869, 24879,
        24888, 24898, 24907, 24916, 24925, 24934, 24943, 24951, 24960, 24968, 24976, 24985, 24993, 25001, 25009,
        25016, 25024, 25032, 25039, 25046, 25054, 25061, 25068, 25075, 25082, 25089, 25096, 25103, 25109, 25116,
        25122, 25129, 25135, 25141, 25148, 25154, 25160, 25166, 25172, 25178, 25183, 25189, 25195, 25201, 25206,
        25212, 25217, 25222, 25228, 25233, 25238, 25243, 25249, 25254, 25259, 25264, 25269, 25273, 25278, 25283,
        25288, 25292, 25297, 25302, 25306, 25311, 25315, 25320, 25324, 25328, 25333, 25337, 25341, 25345, 25349,
        25354, 25358, 25362, 25366, 25370, 25374, 25377, 25381, 25385, 25389, 25393, 25396, 25400, 25404, 25407,
        25411, 25414, 25418, 25421, 25425, 25428, 25432, 25435, 25439, 25442, 25445, 25448, 25452, 25455, 25458,
        25461, 25464, 25468, 25471, 25474, 25477, 25480, 25483, 25486, 25489, 25492, 25495, 25498, 25500,
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

    def measured_bandwidth(self, block_bytes: int) -> float:
        """Bytes per second the measured table gives for blocks of this size (the nearest entry at or
        above it; the last entry beyond the table), capped at PEAK_BW."""
        table = self.dma_measured_mbps
        index = min(max(-(-block_bytes // self.dma_measured_block_step), 1), len(table)) - 1
        return min(table[index] * 1e6, self.peak_bandwidth)

    def exchange_cycles(self, nbytes: int) -> float:
        """Cycles the mesh spends exchanging the pieces of a transfer of `nbytes` (each CPE its share)."""
        vectors = -(-nbytes // self.cpes // self.register_vector_bytes)
        return self.register_comm_latency_cycles + self.sync_cycles + self.exchange_instructions_per_vector * vectors


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
    # The micro-kernel vectorizes the free dimension C's layout makes contiguous
    # (`backends/host/layout.vector_dim`): a schedule's choice of one changes no code.
    vector_dim_from_layout: bool = True
    # A "DMA" is a packing copy the core runs itself: double buffering has nothing to overlap it with,
    # so the space leaves it out (the backend still runs double-buffered IR it is given).
    asynchronous_dma: bool = False
    # A GEMM whose factor is a tile of zero padding alone is skipped (`swauto.passes.guard_padding`).
    skips_zero_tiles: bool = True
    # No mesh: no transfer is exchanged (`swauto.passes.exchange_transfers`).
    exchange_min_gain: float = 0.0
    # A packing copy into a buffer beyond this many bytes (the host target: half of its L2) writes it out of
    # the core's cache, and the calls read it back from beyond: `swauto.passes.hoist_dma` counts a map's
    # such buffer's bytes twice (0: none).
    cache_bytes: int = 0
    # The micro-kernel starts its accumulators at zero for a GEMM that overwrites its C tile: a zeroing
    # right before such a GEMM folds into it (`swauto.passes.fold_zeros`).
    folds_zeros: bool = True

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

    @property
    def vector_dim_from_layout(self) -> bool: ...

    @property
    def skips_zero_tiles(self) -> bool: ...

    @property
    def exchange_min_gain(self) -> float: ...

    @property
    def cache_bytes(self) -> int: ...

    @property
    def folds_zeros(self) -> bool: ...


SUNWAY = SW26010()


def local_memory_machine(target: str) -> LocalMemoryMachine:
    """The machine description the scheduler uses for `target` (its registered `swauto.targets.Target`'s;
    the host's explores the register tiles of the instruction set its kernels are compiled for)."""
    return targets.get(target).machine()
