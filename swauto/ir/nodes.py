"""Statement nodes of the IR (thesis 6.2.4.1) and the module that registers tensors and buffers once.

Every node is a frozen dataclass: two IRs are equal when they print the same, and hash alike.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from swauto import primitives
from swauto.ir.expr import Const, Expr, compiled
from swauto.primitives import Primitive

# --- tensors, buffers and the boxes of them that statements touch ---------------------------------


@dataclass(frozen=True)
class Tensor:
    """A tensor in main memory, row-major (C order) in `shape`, which is its memory order.

    `layout` says which declared axis each memory axis is (empty: the declared order); the kernel
    converts arrays at its boundary, so backends only ever see memory order.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    is_output: bool = False
    layout: tuple[int, ...] = ()
    is_local: bool = False  # an intermediate of the operator: the kernel allocates it, callers never see it
    # An input that does not change between calls (`compile(constants=...)`, bound by `Kernel.prepare`): a
    # backend may rearrange its tiles once, when it is bound, instead of at every call.
    is_constant: bool = False


@dataclass(frozen=True)
class LocalBuffer:
    """A buffer in the mesh's local memories (on the host: a packed, aligned scratch buffer).

    `shape` is the whole mesh's tile, row-major; the primitive spreads it over the 64 CPEs.
    `offset` is its place in each CPE's local memory (per-CPE bytes), set by `plan_local_memory`.
    `statement` is the compute block's statement (nest) that uses it: buffers of different
    statements are never live at once, so they may share local memory. `copy_of` names the buffer
    whose tiles this one holds in the primitive's compute precision (the SW26010 GEMM's float64
    copies, which only take local memory; no statement names them). `spread` is how the mesh holds
    it: 'mesh', the GEMM's blocks over the 8 x 8 CPEs (each row of a transfer cut over the mesh
    columns), or 'flat' for data-parallel primitives (maps, reductions, transforms: each CPE a
    contiguous share, so a transfer moves the box's longest contiguous runs). A `resident` buffer
    holds values later statements read (`forward_transfers`): it shares local memory with no other.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    offset: int | None = None
    statement: int = 0
    copy_of: str | None = None
    spread: str = "mesh"
    resident: bool = False


@dataclass(frozen=True)
class Access:
    """A rectangular box of a tensor or local buffer.

    Per axis: the first index `starts[i]` and the number of elements `extents[i]`; `dims[i]` names
    the primitive dimension that axis carries ('M', 'N', 'K'), or is None for an axis the primitive
    does not see. In a primitive operand such an axis has extent 1; in a DMA it may be longer (a
    hoisted transfer moves several tiles at once). Several axes may carry one dimension (a loop
    fused into it): the dimension's index then splits over them in mixed radix, outermost axis first.
    """

    name: str
    starts: tuple[Expr, ...]
    extents: tuple[int | Expr, ...]  # expressions (a last tile's min(...)) until `peel_boundaries` settles them
    dims: tuple[str | None, ...]
    # Zeros after the box along each axis (empty: none): a primitive operand padded up to the sizes
    # the primitive accepts. The box's elements are the valid ones; the padding is read as 0.
    pad: tuple[int, ...] = ()
    # Elements between consecutive indices along each axis (empty: 1 everywhere): a box of a tensor
    # may step through an axis (a stride-2 convolution's columns fused into a primitive dimension);
    # a strided DMA gathers it into a dense buffer box.
    steps: tuple[int, ...] = ()
    # The array axis each axis walks (empty: axis i walks axis i). Several axes may walk one axis of a
    # tensor: its index there is the sum of theirs (start + index x step each), so the box is a
    # window whose rows overlap (a kernel column fused into K beside output columns in M reads the
    # input's columns as columns x taps). Only input boxes of tensors are windows; buffers never.
    walks: tuple[int, ...] = ()

    def padded_extents(self) -> tuple[int, ...]:
        return tuple(e + p for e, p in zip(self.extents, self.pad, strict=True)) if self.pad else self.extents

    def spans(self) -> tuple[int, ...]:
        """Per axis, the indices from the box's first element to its last, padding included: the
        extents of the dense box around it."""
        extents = self.padded_extents()
        if not self.steps:
            return extents
        return tuple((e - 1) * s + 1 for e, s in zip(extents, self.steps, strict=True))

    def step(self, axis: int) -> int:
        return self.steps[axis] if self.steps else 1

    def walked(self, axis: int) -> int:
        """The array axis that axis `axis` of the box walks."""
        return self.walks[axis] if self.walks else axis

    def in_window(self, axis: int) -> bool:
        """Whether another axis of the box walks the array axis that axis `axis` walks."""
        return bool(self.walks) and self.walks.count(self.walks[axis]) > 1

    def bounding_box(self) -> Access:
        """The dense box over the array's own axes that holds every element of this one (itself when
        every axis walks its own): per array axis, the sum of its walkers' starts and their spans
        joined. What bounds checks and overlap proofs look at."""
        if not self.walks:
            return self
        rank = max(self.walks) + 1
        starts: list[Expr | None] = [None] * rank
        spans: list[int | Expr] = [1] * rank
        dims: list[str | None] = [None] * rank
        for axis, (start, span, dim) in enumerate(zip(self.starts, self.spans(), self.dims, strict=True)):
            walked = self.walks[axis]
            first = starts[walked]
            starts[walked] = start if first is None else first + start
            spans[walked] = spans[walked] + span - 1
            dims[walked] = dim if self.walks.count(walked) == 1 else None
        return Access(self.name, tuple(s if s is not None else Const(0) for s in starts), tuple(spans), tuple(dims))


# --- statements -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class For:
    """`for var in start..stop step stride` (half-open)."""

    var: str
    start: Expr
    stop: Expr
    stride: int
    body: Stmt


@dataclass(frozen=True)
class Seq:
    """Statements run left to right."""

    stmts: tuple[Stmt, ...]


COMPARISONS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
                ">=": operator.ge}


@dataclass(frozen=True)
class Compare:
    op: str  # < <= == != > >=
    left: Expr
    right: Expr

    def holds(self, env: Mapping[str, int]) -> bool:
        """Whether the comparison is true for the variables' values in `env`."""
        return COMPARISONS[self.op](compiled(self.left)(env), compiled(self.right)(env))


@dataclass(frozen=True)
class If:
    cond: Compare
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True)
class Let:
    """`var = value`, visible to the statements after it in the enclosing Seq."""

    var: str
    value: Expr


@dataclass(frozen=True)
class Alloc:
    """Reserve a local buffer (declared in the module's buffer table) for the whole kernel."""

    buffer: str


@dataclass(frozen=True)
class Dma:
    """An asynchronous DMA between a box of a tensor and a box of a local buffer of the same shape.

    `direction` is 'get' (memory to local) or 'put' (local to memory); `reply` names the counter
    a `DmaWait` waits on (it waits for every transfer issued with that reply). With `zero_fill`, a
    get may reach outside the tensor: those elements of the buffer box become 0 and only the part
    inside moves (the zero padding of a convolution, without a padded copy of the input). An
    `exchanged` transfer of a mesh-spread buffer moves the box as a data-parallel buffer's would (its
    longest contiguous runs, about one block per CPE) and the mesh passes the pieces to the CPEs its
    layout gives them over the register network (a get once it has arrived, before its wait returns;
    a put before it leaves): the same data lands in the same places (`swauto.passes.exchange_transfers`).
    An exchanged window moves its bounding box (`moved_box`).
    """

    direction: str
    tensor: Access
    buffer: Access
    reply: str
    zero_fill: bool = False
    exchanged: bool = False

    def moved_box(self) -> Access:
        """The box of the tensor the DMA engine moves: an exchanged window's bounding box (its rows
        overlap: the CPEs build the window while they exchange it), else the transfer's own box."""
        return self.tensor.bounding_box() if self.exchanged else self.tensor


@dataclass(frozen=True)
class Zero:
    """Set a box of a local buffer to 0 (the padding of a primitive operand, before its DMA fills
    the valid part)."""

    buffer: Access


@dataclass(frozen=True)
class DmaWait:
    reply: str


Size = int | Expr  # a call's size is an int once `peel_boundaries` has run; an expression before


@dataclass(frozen=True)
class Call:
    """A call of the tensorized primitive `primitive` (`swauto.primitives.REGISTRY`) on operand boxes.

    `sizes` gives each of the primitive's dimensions its extent, in the primitive's order; `operands`
    a box per role, in the primitive's role order (boxes of tensors in the seed, of local buffers
    once `infer_dma` has run). `vectorize` is the free dimension the primitive vectorizes (None until
    chosen, or for primitives without the choice). With `overwrite`, the statement around this call
    overwrites its output instead of combining into it (run alone, the call combines into the
    identity): `init_outputs` first sets each tile it writes to the combine's identity and clears the
    flag, except for a sum whose every output tile is completed inside the loops that move it (the
    loops inside them only reduce into it), whose tile `infer_dma` then zeroes in local memory before
    those loops, clearing the flag. `constant` is the primitive's scalar argument.
    `runs_if` holds conditions on the loop variables around the call (`guard_padding`): where one fails,
    a factor of the product lies wholly in a padded tensor's zeros, so the call would add zeros and is
    skipped. A backend may run it anyway (the result is the same for finite operands).
    `epilogue` holds element-wise calls fused into this one (a consumer fused into its producer):
    they run on the output box once it is complete, before it is written back; `infer_dma` makes
    them statements of their own (their output box is this call's, their other inputs get transfers).
    """

    primitive: str
    sizes: tuple[tuple[str, Size], ...]
    operands: tuple[tuple[str, Access], ...]
    vectorize: str | None = None
    overwrite: bool = False
    constant: float | None = None
    epilogue: tuple[Call, ...] = ()
    runs_if: tuple[Compare, ...] = ()

    @property
    def signature(self) -> Primitive:
        return primitives.get(self.primitive)

    def size(self, dim: str) -> Size:
        """The extent of dimension `dim` (1 for a dimension the call does not have)."""
        return dict(self.sizes).get(dim, 1)

    def operand(self, role: str) -> Access:
        return dict(self.operands)[role]

    @property
    def output(self) -> Access:
        return self.operands[-1][1]

    @property
    def output_role(self) -> str:
        return self.operands[-1][0]

    def with_operands(self, change: Callable[[str, Access], Access]) -> Call:
        """The call with each operand box replaced by `change(role, box)`."""
        return replace(self, operands=tuple((role, change(role, access)) for role, access in self.operands))

    def with_sizes(self, sizes: Mapping[str, Size]) -> Call:
        """The call with the dimensions in `sizes` given new extents."""
        return replace(self, sizes=tuple((dim, sizes.get(dim, value)) for dim, value in self.sizes))

    @property
    def transfers(self) -> tuple[tuple[str, Access], ...]:
        """The boxes transfers move for this call: its operands, then the epilogue's inputs other than
        this call's output box (named `<primitive><i>_<role>`)."""
        extra = tuple((f"{call.primitive}{index}_{role}", access) for index, call in enumerate(self.epilogue)
                      for role, access in call.operands if access.name != self.output.name)
        return self.operands + extra

    @property
    def flops(self) -> int:
        return self.signature.flops({dim: int(value) for dim, value in self.sizes})  # type: ignore[arg-type]


Stmt = For | Seq | If | Let | Alloc | Dma | DmaWait | Zero | Call


@dataclass(frozen=True)
class Module:
    """One kernel: its tensors (the arguments, in order), local buffers and body.

    `context` names the variables the body uses without defining them, with their first and last
    values: the sequence loops around a statement of the compute block that is lowered on its own.
    """

    name: str
    tensors: tuple[Tensor, ...]
    buffers: tuple[LocalBuffer, ...]
    body: Stmt
    context: tuple[tuple[str, int, int], ...] = ()

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.tensors if t.name == name)

    def buffer(self, name: str) -> LocalBuffer:
        return next(b for b in self.buffers if b.name == name)


def seq(*stmts: Stmt) -> Stmt:
    """A Seq with nested Seqs flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for stmt in stmts:
        flat.extend(stmt.stmts if isinstance(stmt, Seq) else (stmt,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def fingerprint(node: Module | Stmt) -> str:
    """A hash of the IR that is the same in every process (Python's `hash` of strings is salted per
    process): for caches kept on disk and for naming golden files."""
    return hashlib.sha256(repr(node).encode()).hexdigest()[:16]


def gemm_call(m: Size, n: Size, k: Size, a: Access, b: Access, c: Access, vectorize: str | None = None) -> Call:
    """The GEMM primitive `C += A x B` with sizes m, n, k."""
    return Call("gemm", (("M", m), ("N", n), ("K", k)), (("A", a), ("B", b), ("C", c)), vectorize)
