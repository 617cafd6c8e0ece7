"""One point of the schedule space: the choice made for every directive of the schedule block."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from swauto.errors import ScheduleError
from swauto.frontend.integers import check_integer


@dataclass(frozen=True)
class Candidate:
    """Split factors (per split target), the loop order (outermost first), the vectorized dimension,
    the memory layout of each tensor that has a choice (declared axes in memory order), whether
    transfers are double buffered, on the host the micro-kernel's register tile (rows, vectors;
    None: the backend's default), and the statements fused into their producers (by name). Its `id`
    is a stable hash of its JSON form, the same for every shape."""

    splits: tuple[tuple[str, int], ...]
    order: tuple[str, ...]
    vectorize: str
    layouts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    double_buffer: bool = False
    micro_kernel: tuple[int, int] | None = None
    fused: tuple[str, ...] = ()

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
        if self.fused:  # likewise: candidates of operators without fusion keep their ids
            data["fuse"] = list(self.fused)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_json(data: str | Mapping[str, Any]) -> Candidate:
        """The candidate of a JSON form (text or its parsed dict), validated strictly: `splits`, `order`
        and `vectorize` are required; `layouts`, `double_buffer`, `micro_kernel` and `fuse` are optional; no
        other field; integers are JSON integers (not floats, not booleans, not strings), booleans are
        JSON booleans. Raises ScheduleError with a sentence naming the field."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except (ValueError, RecursionError) as error:  # RecursionError: absurdly nested JSON
                raise ScheduleError(f"not a candidate schedule in JSON form: {error}") from None
        if not isinstance(data, Mapping):
            raise ScheduleError(f"a candidate schedule in JSON form is an object, got {type(data).__name__}")
        unknown = sorted(str(name) for name in set(data) - _FIELDS)
        if unknown:
            raise ScheduleError(f"a candidate schedule has no field {unknown[0]!r}; its fields are "
                              f"{', '.join(sorted(_FIELDS))}")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise ScheduleError(f"a candidate schedule needs the field {missing[0]!r}")
        splits = _mapping(data["splits"], "splits")
        layouts = _mapping(data.get("layouts", {}), "layouts")
        order = _list(data["order"], "order")
        double_buffer = data.get("double_buffer", False)
        if not isinstance(double_buffer, bool):
            raise ScheduleError(f"double_buffer must be true or false, got {double_buffer!r}")
        micro_kernel = data.get("micro_kernel")
        if micro_kernel is not None:
            if len(_list(micro_kernel, "micro_kernel")) != 2:
                raise ScheduleError(f"micro_kernel must be two positive integers [rows, vectors], got {micro_kernel!r}")
            micro_kernel = tuple(_integer(value, "micro_kernel", 1) for value in micro_kernel)
        return Candidate(
            splits=tuple((name, _integer(factor, f"splits.{name}", 1)) for name, factor in splits.items()),
            order=tuple(_string(loop, "order") for loop in order),
            vectorize=_string(data["vectorize"], "vectorize"),
            layouts=tuple((name, tuple(_integer(axis, f"layouts.{name}", 0) for axis in _list(axes, f"layouts.{name}")))
                          for name, axes in layouts.items()),
            double_buffer=double_buffer,
            micro_kernel=micro_kernel,  # type: ignore[arg-type]
            fused=tuple(_string(name, "fuse") for name in _list(data.get("fuse", []), "fuse")),
        )

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
        if self.vectorize:
            parts.append(f"vectorize {self.vectorize}")
        if self.fused:
            parts.append(f"fused {', '.join(self.fused)}")
        parts.append("double buffered" if self.double_buffer else "single buffered")
        if self.micro_kernel is not None:
            parts.append("micro-kernel {} rows x {} vectors".format(*self.micro_kernel))
        return "; ".join(parts)

    def __str__(self) -> str:
        return f"{self.id}  {self.describe()}"


_REQUIRED = ("splits", "order", "vectorize")
_FIELDS = frozenset({*_REQUIRED, "layouts", "double_buffer", "micro_kernel", "fuse"})


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
        raise ScheduleError(f"{field} must be an object of names, got {value!r}")
    return value


def _list(value: object, field: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ScheduleError(f"{field} must be a list, got {value!r}")
    return list(value)


def _string(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise ScheduleError(f"{field} must hold names (strings), got {value!r}")
    return value


def _integer(value: object, field: str, minimum: int) -> int:
    """An integer of at least `minimum` (a float such as 128.0 or 128.9, a bool or a string is refused)."""
    return check_integer(value, field, minimum, error=ScheduleError)
