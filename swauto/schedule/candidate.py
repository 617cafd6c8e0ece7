"""One point of the schedule space: the choice made for every directive of the schedule block."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from swauto.errors import SwautoError


@dataclass(frozen=True)
class Candidate:
    """Split factors (per split target), the loop order (outermost first), the vectorized dimension,
    the memory layout of each tensor that has a choice (declared axes in memory order), and whether
    transfers are double buffered. Its `id` is a stable hash of its JSON form, the same for every shape."""

    splits: tuple[tuple[str, int], ...]
    order: tuple[str, ...]
    vectorize: str
    layouts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    double_buffer: bool = False

    def __post_init__(self) -> None:
        # Splits and layouts commute: keep them sorted so equal choices make equal candidates (and ids).
        object.__setattr__(self, "splits", tuple(sorted(self.splits)))
        object.__setattr__(self, "layouts", tuple(sorted(self.layouts)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "splits": dict(self.splits),
            "order": list(self.order),
            "vectorize": self.vectorize,
            "layouts": {tensor: list(permutation) for tensor, permutation in self.layouts},
            "double_buffer": self.double_buffer,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_json(data: str | dict[str, Any]) -> Candidate:
        try:
            value = json.loads(data) if isinstance(data, str) else data
            return Candidate(
                splits=tuple((str(k), int(v)) for k, v in value["splits"].items()),
                order=tuple(str(v) for v in value["order"]),
                vectorize=str(value["vectorize"]),
                layouts=tuple((str(k), tuple(int(a) for a in v)) for k, v in value.get("layouts", {}).items()),
                double_buffer=bool(value.get("double_buffer", False)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise SwautoError(f"not a candidate schedule in JSON form: {error}") from None

    @property
    def id(self) -> str:
        return hashlib.sha1(self.to_json().encode()).hexdigest()[:8]

    def describe(self) -> str:
        parts = []
        if self.splits:
            parts.append("split " + " ".join(f"{target}={factor}" for target, factor in self.splits))
        parts.append(f"loops {' > '.join(self.order) or '(none)'}")
        for tensor, permutation in self.layouts:
            parts.append(f"{tensor} layout {list(permutation)}")
        parts.append(f"vectorize {self.vectorize}")
        parts.append("double buffered" if self.double_buffer else "single buffered")
        return "; ".join(parts)

    def __str__(self) -> str:
        return f"{self.id}  {self.describe()}"
