"""Skipping the taps that read only zero padding (a target that asks for it: `skips_zero_tiles`).

A convolution's GEMM for kernel tap (kr, kc) over a tile of output pixels reads the input at rows
ro * stride + kr - pad: at the image's edges the whole tile may lie in the padding, which reads as
zeros, and the GEMM adds nothing. On a 7 x 7 image with a 3 x 3 kernel and one pixel per GEMM that
is 18% of the calls (PyTorch evidently skips them: counted with every tap, it ran ResNet-50 res5_3x3
at B = 8 above the measured peak).

Guarantees: every GEMM that adds into its output (no `overwrite`), on operand boxes of tensors, gets
`runs_if`: per factor (A and B) and axis of the tensor where the box can leave the tensor for some
value of the loops around the call, the condition that its last index is >= 0 and its first is <= the
last index of the tensor. Where one fails the factor's box lies wholly outside the tensor, whose
elements there read as zeros: the call adds zeros, so skipping it leaves the output as it was (for
finite operands; 0 x inf would be NaN). Boxes always inside give no condition; nothing else changes.
Runs before `infer_dma`, on boxes of tensors; the conditions name only loop variables, which later
passes keep, so they hold wherever the call is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from swauto.ir import expr as ex
from swauto.ir.nodes import Call, Compare, For, Module, Stmt
from swauto.ir.visitor import Rewriter

Ranges = dict[str, tuple[float, float]]  # each loop variable's first and last value (unbounded: infinite)


def padding_guards(call: Call, ranges: Mapping[str, tuple[float, float]],
                   shapes: Mapping[str, tuple[int, ...]]) -> tuple[Compare, ...]:
    """The conditions under which `call` (a GEMM that adds into its output, on boxes of the tensors in
    `shapes`) reads something other than padding in every factor, given each loop variable's range
    (inclusive) in `ranges`: none where no factor's box can leave its tensor."""
    if call.signature.kind != "gemm" or call.overwrite or call.epilogue:
        return ()
    guards: list[Compare] = []
    for role, access in call.operands:
        if role == call.output_role or access.name not in shapes or access.pad:
            continue
        box = access.bounding_box()
        for start, span, size in zip(box.starts, box.spans(), shapes[access.name], strict=True):
            if not isinstance(span, int):
                return ()  # a last tile's extent not settled yet (before `peel_boundaries`)
            last = start + (span - 1)
            if _bounds(last, ranges)[0] < 0:
                guards.append(Compare(">=", last, ex.Const(0)))
            if _bounds(start, ranges)[1] > size - 1:
                guards.append(Compare("<=", start, ex.Const(size - 1)))
    return tuple(guards)


def _bounds(expr: ex.Expr, ranges: Mapping[str, tuple[float, float]]) -> tuple[float, float]:
    """`ex.bounds`, or no bound where a variable has no range or `expr` is not bounded (then tested).
    (A bound that comes out NaN from infinite ranges compares false: the call is left unguarded, which
    only forgoes a skip.)"""
    try:
        return ex.bounds(expr, ranges)  # type: ignore[arg-type]
    except (KeyError, ValueError, ArithmeticError):
        return -math.inf, math.inf


class _Guard(Rewriter):
    """Guards each call in `shapes`' tensors, knowing the range of every loop variable around it."""

    def __init__(self, ranges: Ranges, shapes: Mapping[str, tuple[int, ...]]) -> None:
        self.ranges, self.shapes, self.changed = ranges, shapes, False

    def rewrite_For(self, loop: For) -> Stmt:
        outer = self.ranges
        self.ranges = {**outer, loop.var: (_bounds(loop.start, outer)[0], _bounds(loop.stop, outer)[1] - 1)}
        try:
            return self.generic_rewrite(loop)
        finally:
            self.ranges = outer

    def rewrite_Call(self, call: Call) -> Call:
        guards = padding_guards(call, self.ranges, self.shapes)
        self.changed |= bool(guards)
        return replace(call, runs_if=guards) if guards else call


def guard_padding(module: Module) -> Module:
    """`module` with its GEMMs on tensors guarded against tiles of padding alone (module docstring);
    the same module where no box can leave its tensor."""
    guard = _Guard({name: (first, last) for name, first, last in module.context},
                   {tensor.name: tensor.shape for tensor in module.tensors})
    body = guard.rewrite(module.body)
    return replace(module, body=body) if guard.changed else module
