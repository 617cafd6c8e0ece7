"""DMA inference (thesis algorithm 7).

Guarantees: after this pass every primitive operand is a local buffer. For each operand box of a
tensor, a local buffer of the box's shape is allocated at the root, and a `dma get` (then a wait)
is placed as the leftmost child of the innermost loop whose iterator the box's address depends on
(at the root when it depends on none). For an output, the same get (the primitive accumulates into
it) and a `dma put` (then a wait) as the rightmost child of that loop: once every iteration inside
it has updated the tile.
"""

from __future__ import annotations

from dataclasses import replace

from swauto.ir import expr as ex
from swauto.ir.nodes import Access, Alloc, Dma, DmaWait, For, Gemm, LocalBuffer, Module, Stmt, seq
from swauto.ir.visitor import walk


def _buffer_names(call: Gemm) -> dict[str, str]:
    """`{tensor}_tile` per operand; `{tensor}_{operand}_tile` when one tensor feeds two operands."""
    tensors = [access.name for _, access in call.operands]
    return {
        operand: f"{access.name}_tile" if tensors.count(access.name) == 1 else f"{access.name}_{operand}_tile"
        for operand, access in call.operands
    }


def infer_dma(module: Module) -> Module:
    calls = [(node, loops) for node, loops in walk(module.body) if isinstance(node, Gemm)]
    assert len(calls) == 1, "infer_dma expects one primitive call"
    call, loops = calls[0]
    names = _buffer_names(call)
    buffers: list[LocalBuffer] = []
    placed_before: dict[str | None, list[Stmt]] = {}  # loop var (None: root) -> statements to prepend
    placed_after: dict[str | None, list[Stmt]] = {}
    local_operands: dict[str, Access] = {}
    for operand, access in call.operands:
        buffer_name = names[operand]
        shape = tuple(e for e, d in zip(access.extents, access.dims, strict=True) if d is not None)
        buffers.append(LocalBuffer(buffer_name, shape, module.tensor(access.name).dtype))
        local = Access(buffer_name, tuple(ex.Const(0) for _ in shape), shape,
                       tuple(d for d in access.dims if d is not None))
        local_operands[operand] = local
        used = set().union(*(ex.free_vars(s) for s in access.starts))
        home = next((loop.var for loop in reversed(loops) if loop.var in used), None)
        reply = f"{buffer_name}_ready"
        placed_before.setdefault(home, []).extend([Dma("get", access, local, reply), DmaWait(reply)])
        if module.tensor(access.name).is_output:
            done = f"{buffer_name}_written"
            placed_after.setdefault(home, []).extend([Dma("put", access, local, done), DmaWait(done)])
    new_call = replace(call, a=local_operands["A"], b=local_operands["B"], c=local_operands["C"])

    def rebuild(index: int) -> Stmt:
        if index == len(loops):
            return new_call
        loop = loops[index]
        body = seq(*placed_before.get(loop.var, []), rebuild(index + 1), *placed_after.get(loop.var, []))
        return For(loop.var, loop.start, loop.stop, loop.stride, body)

    body = seq(
        *(Alloc(b.name) for b in buffers),
        *placed_before.get(None, []),
        rebuild(0),
        *placed_after.get(None, []),
    )
    return replace(module, buffers=module.buffers + tuple(buffers), body=body)
