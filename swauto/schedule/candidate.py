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
    the memory layout of each tensor that has a choice (declared axes in memory order), whether
    transfers are double buffered, and on the host the micro-kernel's register tile (rows, vectors;
    None: the backend's default). Its `id` is a stable hash of its JSON form, the same for every shape."""

    splits: tuple[tuple[str, int], ...]
    order: tuple[str, ...]
    vectorize: str
    layouts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    double_buffer: bool = False
    micro_kernel: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        # Splits and layouts commute: keep them sorted so equal choices make equal candidates (and ids).
        object.__setattr__(self, "splits", tuple(sorted(self.splits)))
        object.__setattr__(self, "layouts", tuple(sorted(self.layouts)))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "splits": dict(self.splits),
            "order": list(self.order),
            "vectorize": self.vectorize,
            "layouts": {tensor: list(permutation) for tensor, permutation in self.layouts},
            "double_buffer": self.double_buffer,
        }
        if self.micro_kernel is not None:  # absent otherwise, so SW26010 candidates keep their ids
            data["micro_kernel"] = list(self.micro_kernel)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_json(data: str | dict[str, Any]) -> Candidate:
        try:
            value = json.loads(data) if isinstance(data, str) else data
            micro_kernel = value.get("micro_kernel")
            if micro_kernel is not None:
                rows, vectors = (int(v) for v in micro_kernel)
                micro_kernel = (rows, vectors)
            return Candidate(
                splits=tuple((str(k), int(v)) for k, v in value["splits"].items()),
                order=tuple(str(v) for v in value["order"]),
                vectorize=str(value["vectorize"]),
                layouts=tuple((str(k), tuple(int(a) for a in v)) for k, v in value.get("layouts", {}).items()),
                double_buffer=bool(value.get("double_buffer", False)),
                micro_kernel=micro_kernel,
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
        if self.micro_kernel is not None:
            parts.append("micro-kernel {} rows x {} vectors".format(*self.micro_kernel))
        return "; ".join(parts)

    def __str__(self) -> str:
        return f"{self.id}  {self.describe()}"
