"""Running a primitive call on NumPy arrays: the semantics the reference and the simulator share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from swauto.ir.memory import dims_view, store_dims
from swauto.primitives.registry import IDENTITY

if TYPE_CHECKING:
    from swauto.ir.nodes import Call


def run_call(call: Call, boxes: Mapping[str, np.ndarray]) -> None:
    """Apply `call` to `boxes` (one array per role, each the box its access describes, a view where
    the result should land): the output box is updated in place. It computes in float64 and stores in
    the output's dtype. A call that overwrites its output combines into the identity (0 for a sum)
    instead of what the box held."""
    signature = call.signature
    views = {role: dims_view(boxes[role], access.dims, signature.dims).astype(np.float64)
             for role, access in call.operands}
    if call.overwrite and signature.combine:
        views[call.output_role] = np.full_like(views[call.output_role], IDENTITY[signature.combine])
    result = signature.compute(views, call.constant)
    out_role, out = call.operands[-1]
    store_dims(boxes[out_role], out.dims, signature.dims, np.asarray(result).astype(boxes[out_role].dtype))
