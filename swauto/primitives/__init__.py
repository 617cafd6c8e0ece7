"""The tensorized primitives a `.sw` seed calls, as data (a registry of signatures and semantics).

`REGISTRY` maps a primitive's name to its `Primitive`: its dimensions (which it reduces), its operand
roles and the dimensions each carries, how its result meets the output (stored, added, kept if
larger), its flop count and its NumPy semantics, which the reference interpreter and the functional
simulator run. A target's lowering, cost and timing are keyed by the primitive's `kind` in the
target's own package. Adding an element-wise operation is one entry in `elementwise.py`.
"""

from swauto.primitives.registry import REGISTRY, Primitive, get, register

# Importing the families registers their primitives.
from swauto.primitives import contraction, elementwise, transform  # noqa: E402,F401  isort: skip

__all__ = ["REGISTRY", "Primitive", "get", "register"]
