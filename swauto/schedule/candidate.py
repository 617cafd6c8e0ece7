"""One point of the schedule space: the choice made for every directive of the schedule block."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from swauto.errors import SwautoError


@dataclass(frozen=True)
class Candidate:
    """Split factors (per split target), the loop order (outermost first) and the
    vectorized dimension. Its `id` is a stable hash of its JSON form, the same for every shape."""

    splits: tuple[tuple[str, int], ...]
    order: tuple[str, ...]
    vectorize: str

    def __post_init__(self) -> None:
        # Splits commute: keep them sorted so equal choices make equal candidates (and ids).
        object.__setattr__(self, "splits", tuple(sorted(self.splits)))

    def to_dict(self) -> dict[str, Any]:
        return {"splits": dict(self.splits), "order": list(self.order), "vectorize": self.vectorize}

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
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise SwautoError(f"not a candidate schedule in JSON form: {error}") from None

    @property
    def id(self) -> str:
        return hashlib.sha1(self.to_json().encode()).hexdigest()[:8]

    def describe(self) -> str:
        tiles = " ".join(f"{target}={factor}" for target, factor in self.splits)
        return f"split {tiles}; loops {' > '.join(self.order)}; vectorize {self.vectorize}"

    def __str__(self) -> str:
        return f"{self.id}  {self.describe()}"
