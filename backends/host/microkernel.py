"""The GEMM primitive on the host: a register-blocked micro-kernel with the widest FMA of the ISA.

C is cut into tiles of `knobs.rows` broadcast elements by `knobs.vectors` vectors; each tile's
accumulators stay in registers for the whole K loop, which per step loads one vector per column group
of the vector operand, broadcasts one element per row of the other operand and issues rows x vectors
FMAs. Where the columns are not a whole number of such tiles, they are cut as evenly as the fewest
tiles allow (`Knobs.column_tiles`); narrower tiles take more rows (`Knobs.rows_for`); the last ones
hold the columns left over from whole vectors (in narrower vectors, then single lanes) and the rows
left over.

Every operand offset is `base + table[d][i]` summed over its dimensions d: `base` holds the starts
known only at run time, `table` (computed here, from the layouts) the rest. A table that is affine
becomes a multiplication, any other (packed panels, several axes carrying one dimension) a constant
lookup array, so any layout and any mixed-radix split of a dimension is correct, and the packed ones
are fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from llvmlite import ir

from swauto.errors import CodegenError
from swauto.ir.expr import Const, Expr, linear_form
from swauto.ir.nodes import Access, Call
from swauto.ir.printer import format_access

from .isa import Isa, cache_sizes
from .knobs import MIN_ACCUMULATORS
from .layout import gemm_roles
from .values import F32, I64, Env, Storage, call_function, i64

if TYPE_CHECKING:
    from .codegen import Lowering

_NSW = ("nsw",)
CACHE_LINE_FLOATS = 16  # 64 bytes
_BARRIER = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", side_effect=True)


@dataclass(frozen=True)
class OperandMap:
    """Where a GEMM operand's elements are: `storage.base + base + sum(tables[d][index_d])`."""

    storage: Storage
    base: ir.Value
    tables: Mapping[str, tuple[int, ...]]


def emit_gemm(lw: Lowering, stmt: Call, env: Env) -> None:
    """Emit `C += A x B` (`C = A x B` where `stmt.overwrite`) for `stmt` at the builder's position (see the
    module docstring)."""
    sizes = {dim: int(value) for dim, value in stmt.sizes}
    if min(sizes.values()) < 1:
        raise CodegenError("gemm sizes must be positive, got " + " ".join(f"{d}={v}" for d, v in stmt.sizes))
    for name, access in stmt.operands:
        check_operand(stmt, name, access, sizes)
    roles = gemm_roles(stmt)
    v, vector_access = roles["vector"]
    u, broadcast_access = roles["broadcast"]
    maps = {
        "V": operand_map(lw, vector_access, sizes, env),
        "U": operand_map(lw, broadcast_access, sizes, env),
        "C": operand_map(lw, roles["C"][1], sizes, env),
    }
    _Kernel(lw, maps, u, v, sizes, stmt.overwrite).emit()


def aligned_rows(tables: Sequence[Sequence[int]], size: int, most: int) -> int:
    """The most rows of a register tile, from `most` down to half of it, at which every whole row tile of
    `size` rows finds its rows at the same offsets from its first in each of `tables` (the broadcast
    dimension's offsets in U and in C): one base address per tile, the rows at constants from it;
    `most` where no count down to half of it is so aligned. Rows over two axes (a convolution's columns
    x batch) cut across them otherwise: Inception-v3 Conv2d_2a_3x3 at B = 8, 16 columns x 8 images in
    rows of 13 for 2 vectors (5 x 5 tiles), ran 2x as long as in rows of 8."""
    for rows in range(most, (most + 1) // 2 - 1, -1):
        if all(_tiles_alike(table, (0, rows, size // rows)) for table in tables):
            return rows
    return most


def rows_of_one_run(tables: Sequence[Sequence[int]], size: int, rows: int) -> int:
    """For a column tile of one vector whose broadcast operand is read in place: where its first rows are
    consecutive elements of that operand (`tables[0]`: a batch innermost under a convolution's columns)
    and `rows` would take several such runs, as many rows as one run holds, if at least `MIN_ACCUMULATORS` and
    every tile of them finds its rows alike (`_tiles_alike`); else `rows`. MobileNetV2 block0.0.project
    at B = 8 (16 output channels, one vector; its input in L3), calls of 16 columns x 8 images in turns
    on one thread: rows of 24 (three columns) 2.9 - 3.0 ms, of 16 2.0 - 2.4, of 8 (one column) 1.9 - 2.1,
    as fast as calls of one column; PyTorch 2.1 - 2.5."""
    broadcast = tables[0]
    run = next((i for i in range(1, len(broadcast)) if broadcast[i] != broadcast[i - 1] + 1), len(broadcast))
    if not MIN_ACCUMULATORS <= run < rows or any(not _tiles_alike(table, (0, run, size // run)) for table in tables):
        return rows
    return run


def _tiles_alike(table: Sequence[int], run: tuple[int, int, int]) -> bool:
    """Whether every tile of `run` (first, tile, tiles: `tiles` tiles of `tile` entries from `first`; the last
    may end with the table) finds its entries of `table` at the same offsets from its first as the first tile."""
    first, tile, tiles = run
    return all(table[s + w] - table[s] == table[first + w] - table[first]
               for s in range(first, first + tile * tiles, tile) for w in range(min(tile, len(table) - s)))


class _Kernel:
    """The tile loops and micro-kernels of one GEMM statement."""

    def __init__(self, lw: Lowering, maps: dict[str, OperandMap], u: str, v: str, sizes: Mapping[str, int],
                 overwrite: bool) -> None:
        self.lw, self.maps, self.u, self.v = lw, maps, u, v
        self.overwrite = overwrite
        self.builder = lw.builder
        self.width = lw.isa.width
        self.u_size, self.v_size, self.k_size = sizes[u], sizes[v], sizes["K"]
        self.vector_type = ir.VectorType(F32, self.width)
        self.fma_name = "llvm.fma" if lw.isa.fma else "llvm.fmuladd"

    def emit(self) -> None:
        slots = lane_groups(self.v_size, self.width)  # the lanes of each vector of a row of C
        first = 0  # slot
        for vectors, count in self.lw.knobs.column_tiles(len(slots)):
            tiles = [slots[first + t * vectors:first + (t + 1) * vectors] for t in range(count)]
            # Tiles of whole vectors run in a loop; one holding narrower vectors (the last) runs alone.
            looped = sum(all(lanes == self.width for lanes in tile) for tile in tiles)
            lane = sum(slots[:first])
            width = vectors * self.width
            if looped:
                groups = self._groups([lane + t * width for t in range(looped)], width)
                self.lw.loop(i64(0), i64(looped), 1, "gemm.columns",
                             lambda t, run=(lane, width, looped), g=groups: self._column_tile(run, t, g), unroll=False)
            start = lane + looped * width
            for tile in tiles[looped:]:
                self._column_tile((start, sum(tile), 1), i64(0), self._groups([start], sum(tile)))
                start += sum(tile)
            first += count * vectors

    def _column_tile(self, run: tuple[int, int, int], v_tile: ir.Value, groups: Sequence[tuple[int, int]]) -> None:
        """Tile number `v_tile` of the `run` (first lane, lanes per tile, tiles) of column tiles."""
        # A column tile narrower than the register tile's takes more rows, so that its accumulators
        # still hide the FMA latency (GEMM 96 x 16 x 256: 89 GFLOPS in 4 x 1 tiles, 150 in 16 x 1).
        tables = (self.maps["U"].tables[self.u], self.maps["C"].tables[self.u])
        tile = aligned_rows(tables, self.u_size, self.lw.knobs.rows_for(len(groups), self.lw.isa))
        if len(groups) == 1 and self.maps["U"].storage.view_of is not None:
            tile = rows_of_one_run(tables, self.u_size, tile)
        full, remainder = divmod(self.u_size, tile)
        if full:
            self.lw.loop(i64(0), i64(full), 1, "gemm.rows",
                         lambda t: self._micro_kernel(t, tile, tile, run, v_tile, groups), unroll=False)
        if remainder:
            self._micro_kernel(i64(full), tile, remainder, run, v_tile, groups)

    def _groups(self, starts: Sequence[int], width: int) -> list[tuple[int, int]]:
        """Column groups (offset in the tile, lanes) of a tile `width` wide at each of `starts`: the
        widest vector (`lane_groups`: whole vectors, then halves, quarters, ...) whose lanes are
        contiguous in both C and the vector operand at every start, else a single lane."""
        tables = (self.maps["C"].tables[self.v], self.maps["V"].tables[self.v])
        groups: list[tuple[int, int]] = []
        column = 0
        while column < width:
            widths = dict.fromkeys(lane_groups(width - column, self.width))  # each width tried once
            lanes = next((lanes for lanes in widths if all(
                table[s + column + j] == table[s + column] + j for table in tables for s in starts
                for j in range(lanes))), 1)
            groups.append((column, lanes))
            column += lanes
        return groups

    def _micro_kernel(self, u_tile: ir.Value, tile: int, rows: int, run: tuple[int, int, int], v_tile: ir.Value,
                      groups: Sequence[tuple[int, int]]) -> None:
        """Accumulate the C tile (`u_tile` of tiles of `tile` rows; `v_tile` of the column tiles `run`) of
        `rows` x `groups` over all of K, in registers."""
        b = self.builder
        # A compiler barrier: this tile's loads of C stay after the tiles before it. Where register tiles
        # follow each other in straight-line code (one whole row tile and a remainder, a column tile
        # that runs once), LLVM loaded the next tile's accumulators before the last one's K loop, which
        # then held both and spilled them to the stack: 59 of 700 AVX-512 GEMMs of 1 - 20 rows, 1 - 5
        # vectors and 7 register tiles spilled, none with the barrier; Inception-v3 Mixed_5b.branch5x5_2
        # at B = 8 (8 rows in 6 + 2, 4 vectors: 32 accumulators) ran 1.7 - 1.8x as long without it.
        b.call(_BARRIER, [])
        c, vec, bc = self.maps["C"], self.maps["V"], self.maps["U"]
        columns = [column for column, _ in groups]
        rows_run = (0, tile, -(-self.u_size // tile))
        c_row = self._tile_offsets(c.tables[self.u], rows_run, u_tile, range(rows), "C.rows")
        c_column = self._tile_offsets(c.tables[self.v], run, v_tile, columns, "C.columns")
        c_pointers = [[self._pointer(c, [c.base, c_row[r], c_column[g]], lanes)
                       for g, (_, lanes) in enumerate(groups)] for r in range(rows)]
        u_rows = [b.add(bc.base, offset, flags=_NSW)
                  for offset in self._tile_offsets(bc.tables[self.u], rows_run, u_tile, range(rows), "U.rows")]
        v_columns = [b.add(vec.base, offset, flags=_NSW)
                     for offset in self._tile_offsets(vec.tables[self.v], run, v_tile, columns, "V.columns")]
        # Overwriting C (`Call.overwrite`), the accumulators start at zero and C is never read.
        initial = [[ir.Constant(pointer.type.pointee, None) if self.overwrite else b.load(pointer, align=4)
                    for pointer in row] for row in c_pointers]

        # K loop with the accumulators as phis.
        entry = b.block
        header = self.lw.function.append_basic_block("gemm.k.header")
        body = self.lw.function.append_basic_block("gemm.k.body")
        done = self.lw.function.append_basic_block("gemm.k.exit")
        b.branch(header)
        b.position_at_end(header)
        k = b.phi(I64, "k")
        k.add_incoming(i64(0), entry)
        accumulators = [[b.phi(value.type) for value in row] for row in initial]
        for row, values in zip(accumulators, initial, strict=True):
            for phi, value in zip(row, values, strict=True):
                phi.add_incoming(value, entry)
        b.cbranch(b.icmp_signed("<", k, i64(self.k_size)), body, done)
        b.position_at_end(body)
        k_vector = self._lookup(vec.tables["K"], k, "V.k")
        k_broadcast = self._lookup(bc.tables["K"], k, "U.k")
        operands = [b.load(self._pointer(vec, [v_columns[g], k_vector], lanes), align=4)
                    for g, (_, lanes) in enumerate(groups)]
        updated = []
        for r in range(rows):
            scalar = b.load(self._pointer(bc, [u_rows[r], k_broadcast], 1), align=4)
            splats = {lanes: self._splat(scalar, lanes) for lanes in {lanes for _, lanes in groups}}
            updated.append([self._fma(splats[lanes], operands[g], accumulators[r][g])
                            for g, (_, lanes) in enumerate(groups)])
        # After the K step's FMAs: issued before its broadcasts, the prefetches cost MobileNetV2
        # block1.0.project at B = 8 0.71 - 0.78x of its speed without them (1.04 - 1.06x after).
        self._prefetch(u_rows, k_broadcast, rows)
        k.add_incoming(b.add(k, i64(1), flags=_NSW), b.block)
        for row, values in zip(accumulators, updated, strict=True):
            for phi, value in zip(row, values, strict=True):
                phi.add_incoming(value, b.block)
        latch = b.branch(header)
        if rolled_k_loop(rows, len(groups), self.lw.isa):
            latch.set_metadata("llvm.loop", self.lw.no_unroll_id())
        b.position_at_end(done)
        for pointers, values in zip(c_pointers, accumulators, strict=True):
            for pointer, value in zip(pointers, values, strict=True):
                b.store(value, pointer, align=4)

    def _prefetch(self, u_rows: Sequence[ir.Value], k_broadcast: ir.Value, rows: int) -> None:
        """Prefetch, at each K step, the broadcast rows' elements `prefetched_rows` K steps ahead, where the
        rows are read in a tensor larger than the L2 (in place: a tensor argument or a view of one); a
        buffer's copy, or a tensor the L2 holds, is there already. The first row tile's offsets stand
        for every tile's: whole row tiles find theirs alike where `aligned_rows` found a count that
        aligns them; elsewhere the grouping only guesses, which a prefetch, a hint, may."""
        storage = self.maps["U"].storage
        source = storage.view_of or storage.name
        tensor = next((tensor for tensor in self.lw.module.tensors if tensor.name == source), None)
        if tensor is None or 4 * prod(tensor.shape) <= cache_sizes()[1]:
            return
        plan = prefetched_rows(self.maps["U"].tables[self.u][:rows], self.maps["U"].tables["K"])
        if plan is None:
            return
        leaders, ahead = plan
        b = self.builder
        byte_pointer = ir.IntType(8).as_pointer()
        prefetch = self.lw.ir_module.globals.get("llvm.prefetch.p0i8") or ir.Function(
            self.lw.ir_module, ir.FunctionType(ir.VoidType(), [byte_pointer, *[ir.IntType(32)] * 3]),
            "llvm.prefetch.p0i8")
        step = self.maps["U"].tables["K"][1] - self.maps["U"].tables["K"][0]
        read, keep_in_l1, data = (ir.Constant(ir.IntType(32), value) for value in (0, 3, 1))
        for r in leaders:
            # Past the last K step the address runs beyond the operand: a prefetch never faults.
            address = self._pointer(self.maps["U"], [u_rows[r], k_broadcast, i64(ahead * step)], 1)
            b.call(prefetch, [b.bitcast(address, byte_pointer), read, keep_in_l1, data])

    # --- helpers ----------------------------------------------------------------------------------

    def _tile_offsets(self, table: tuple[int, ...], run: tuple[int, int, int], index: ir.Value,
                      within: Sequence[int], name: str) -> list[ir.Value]:
        """table[first + index * tile + w] for each w in `within`, where `run` is (first, tile, tiles): tile
        number `index` of `tiles` tiles of `tile` from `first`. When every tile of the run has the same inner
        offsets (true of affine tables and of packed panels), one lookup of the tile's start plus constants,
        which LLVM folds into addressing; otherwise one lookup per element."""
        first, tile, tiles = run
        starts = table[first:first + tile * tiles:tile]
        if _tiles_alike(table, run):
            start = self._lookup(starts, index, name)
            return [self.builder.add(start, i64(table[first + w] - table[first]), flags=_NSW) for w in within]
        lane = self.builder.add(self.builder.mul(index, i64(tile), flags=_NSW), i64(first), flags=_NSW)
        return [self._lookup(table, self.builder.add(lane, i64(w), flags=_NSW), name) for w in within]

    def _pointer(self, operand: OperandMap, offsets: Sequence[ir.Value], lanes: int) -> ir.Value:
        """Pointer to `lanes` floats at `operand.storage.base + sum(offsets)`."""
        b = self.builder
        total = offsets[0]
        for offset in offsets[1:]:
            total = b.add(total, offset, flags=_NSW)
        pointer = b.gep(operand.storage.base, [total], inbounds=True)
        return pointer if lanes == 1 else b.bitcast(pointer, ir.VectorType(F32, lanes).as_pointer())

    def _lookup(self, table: tuple[int, ...], index: ir.Value, name: str) -> ir.Value:
        return table_lookup(self.lw, table, index, name)

    def _splat(self, scalar: ir.Value, lanes: int) -> ir.Value:
        if lanes == 1:
            return scalar
        vector_type = ir.VectorType(F32, lanes)
        single = self.builder.insert_element(ir.Constant(vector_type, None), scalar, i64(0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
        return self.builder.shuffle_vector(single, ir.Constant(vector_type, None), mask)

    def _fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        kind = a.type
        suffix = "f32" if kind == F32 else f"v{kind.count}f32"
        return call_function(self.builder, f"{self.fma_name}.{suffix}", [a, b, c])


# How far ahead the broadcast rows are prefetched: 16 cache lines of each row's stream, and at least this
# many K steps. MobileNetV2 block1.0.project, block1.1.project and ResNet-50 res2_1x1c at B = 8 ran 0.97 -
# 1.04x as fast prefetched 512 bytes ahead, 1.05 - 1.13x 1024 bytes ahead (2048: 1.07 - 1.15x; 128: 0.91x),
# the prefetches then issued before the broadcasts, each distance in turns with the others.
PREFETCH_BYTES = 1024
PREFETCH_STEPS = 4


def prefetched_rows(offsets: Sequence[int], k_table: Sequence[int]) -> tuple[list[int], int] | None:
    """Which rows of a register tile (their `offsets` in the broadcast operand) the micro-kernel prefetches
    at each K step, and how many K steps ahead: one row per cache line the tile's rows start in, where
    consecutive K steps lie 8 floats apart or more (`k_table`: the K offsets, affine). Then every K step
    or two starts a new line of each row's stream, which the hardware prefetchers did not run far enough
    ahead of: rows over a convolution's columns x 8 images (a layout with the batch innermost) stream K
    through lines 32 bytes a step, a few 1 KB pixels at a time. MobileNetV2 block0.0.project at B = 8
    (K = 32, its 12.8 MB input in place) ran 1.40x as fast with the rows prefetched 1 KB ahead.
    Elsewhere (K contiguous, or a lookup table) None: a row's line lasts 16 K steps, and the prefetchers
    keep up."""
    if len(k_table) < 2:
        return None
    step = k_table[1] - k_table[0]
    if step < 8 or any(offset != k_table[0] + k * step for k, offset in enumerate(k_table)):
        return None
    leaders: list[int] = []
    for r in sorted(range(len(offsets)), key=offsets.__getitem__):
        if not leaders or offsets[r] - offsets[leaders[-1]] >= CACHE_LINE_FLOATS:
            leaders.append(r)
    return leaders, max(PREFETCH_STEPS, PREFETCH_BYTES // (4 * step))


def rolled_k_loop(rows: int, vectors: int, isa: Isa) -> bool:
    """Whether a register tile of `rows` x `vectors` keeps its K loop rolled, where LLVM's two-fold unrolling
    would need more registers than `isa` has and spill on every K step: without FMA (each copy of the body
    holds its products), or one vector of 8 rows or more in a file of 16 registers (AVX2), whose
    accumulators LLVM moved from register to register between the two copies (8 - 10 rows: every one of 81
    spilling GEMMs of 500 scanned held such a tile). Forced AVX2 on an Emerald Rapids core, GEMMs in 4 x 2
    tiles with an edge of one vector ran 1.03 - 1.16x as fast with their K loops rolled; on a Zen 3, the
    spilling tile 1.40x."""
    return not isa.fma or vectors == 1 and isa.registers <= 16 and rows >= 8


def lane_groups(columns: int, width: int) -> list[int]:
    """The vectors a micro-kernel covers `columns` contiguous lanes with: whole vectors of `width`
    lanes, then one each of the halving widths the rest needs (28 lanes of 16: 16, 8, 4), so that a
    short edge runs a few narrow FMAs rather than one per lane."""
    groups = [width] * (columns // width)
    lanes = width
    rest = columns % width
    while rest:
        lanes //= 2
        if rest >= lanes:
            groups.append(lanes)
            rest -= lanes
    return groups


def check_operand(call: Call, name: str, access: Access, sizes: Mapping[str, int]) -> None:
    """The operand carries the primitive's dimensions for it that the call has (all of them, or for a
    map or reduction a subset: broadcast or reduced), each over axes whose extents (with the
    operand's zero padding) multiply to its size; an axis carrying nothing has extent 1."""
    extents = access.padded_extents()
    signature = call.signature
    expected = tuple(dim for dim in signature.role_dims(name) if dim in sizes)
    carried = {dim for dim in access.dims if dim is not None}
    partial = signature.broadcast or signature.reduces_missing
    if not (carried <= set(expected) if partial else carried == set(expected)):
        raise CodegenError(f"{call.primitive} operand {name}={format_access(access)} carries dimensions "
                           f"{sorted(carried)}; it must carry {' and '.join(expected)}")
    for dim in carried:
        span = 1
        for extent, d in zip(extents, access.dims, strict=True):
            span *= extent if d == dim else 1
        if span != sizes[dim]:
            raise CodegenError(f"{call.primitive} operand {name}={format_access(access)} spans {span} along {dim}, "
                               f"but the primitive's {dim} is {sizes[dim]}")
    for extent, dim in zip(extents, access.dims, strict=True):
        if dim is None and extent != 1:
            raise CodegenError(f"{call.primitive} operand {name}={format_access(access)} has an axis of extent "
                               f"{extent} that carries no dimension")


def operand_map(lw: Lowering, access: Access, sizes: Mapping[str, int], env: Env) -> OperandMap:
    """The base and offset tables of `access` (whose dimensions `_check_operand` accepted)."""
    storage = lw.access_storage(access)
    b = lw.builder
    base: ir.Value = i64(0)
    constant = 0
    for axis, (start, dim) in enumerate(zip(access.starts, access.dims, strict=True)):
        axis_layout = storage.layout.axes[axis]
        if isinstance(start, Const):
            if dim is None:
                constant += axis_layout.offset(start.value)
        elif len(axis_layout.extents) == 1:
            base = b.add(base, b.mul(lw.expr(start, env), i64(axis_layout.strides[0]), flags=_NSW), flags=_NSW)
        elif _multiple_of(start, axis_layout.extents[-1]):  # packed in panels: the start's panel
            panel = b.sdiv(lw.expr(start, env), i64(axis_layout.extents[-1]))
            base = b.add(base, b.mul(panel, i64(axis_layout.strides[0]), flags=_NSW), flags=_NSW)
        else:
            raise CodegenError(f"gemm operand {format_access(access)} starts inside a packed panel at run time")
    tables = {}
    extents = access.padded_extents()
    for dim in {d for d in access.dims if d is not None}:
        axes = [a for a, d in enumerate(access.dims) if d == dim]
        table = []
        for index in range(sizes[dim]):
            offset, rest = 0, index
            for axis in reversed(axes):
                local = rest % extents[axis]
                rest //= extents[axis]
                axis_layout = storage.layout.axes[axis]
                start = access.starts[axis]
                offset += (axis_layout.offset(start.value + local) if isinstance(start, Const)
                           else axis_layout.offset(local))  # a run-time start is a whole number of panels
            table.append(offset)
        tables[dim] = tuple(table)
    return OperandMap(storage, b.add(base, i64(constant), flags=_NSW), tables)


def _multiple_of(start: Expr, panel: int) -> bool:
    """Whether the affine `start` is a multiple of `panel` for every value of its variables."""
    form = linear_form(start)
    return form is not None and all(c % panel == 0 for c in (form[1], *form[0].values()))


def table_lookup(lw: Lowering, table: tuple[int, ...], index: ir.Value, name: str) -> ir.Value:
    """table[index] at run time: arithmetic when the table is affine, else a constant array."""
    builder = lw.builder
    stride = table[1] - table[0] if len(table) > 1 else 0
    if all(value == table[0] + i * stride for i, value in enumerate(table)):
        scaled = builder.mul(index, i64(stride), flags=_NSW)
        return builder.add(scaled, i64(table[0]), flags=_NSW)
    array_type = ir.ArrayType(I64, len(table))
    variable = ir.GlobalVariable(lw.ir_module, array_type, lw.ir_module.get_unique_name(f"table.{name}"))
    variable.linkage = "internal"
    variable.global_constant = True
    variable.initializer = ir.Constant(array_type, list(table))
    return builder.load(builder.gep(variable, [i64(0), index], inbounds=True))
