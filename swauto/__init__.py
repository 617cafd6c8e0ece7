"""swauto: a domain-specific tensor compiler for deep-learning operators.

The pipeline, one package each: `frontend` (grammar, parser, checks) -> `schedule` (the space of
candidates) -> `ir` and `passes` -> `tuner` (cost models) -> `backends` (sw26010 simulator, host JIT);
`models` takes whole ONNX models through it layer by layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swauto.errors import (
    ArgumentError,
    CheckError,
    CodegenError,
    ModelError,
    ParameterError,
    ParseError,
    ScheduleError,
    SimulationError,
    SourceError,
    SwautoError,
    UnsupportedSizes,
)

__all__ = [
    "ArgumentError",
    "CheckError",
    "CodegenError",
    "Kernel",
    "Model",
    "ModelError",
    "ParameterError",
    "ParseError",
    "Prepared",
    "ScheduleError",
    "SimulationError",
    "SourceError",
    "SwautoError",
    "UnsupportedSizes",
    "choose",
    "compile",
    "schedules",
    "tune_model",
]
__version__ = "0.1.0"

# Installed, setuptools maps the top-level grammar/ and backends/ folders inside this package. Run
# from a source checkout without installing, let `swauto.grammar` and `swauto.backends` resolve there.
_checkout = Path(__file__).resolve().parent.parent
if not (Path(__file__).parent / "grammar").exists() and (_checkout / "grammar" / "swauto.lark").is_file():
    __path__.append(str(_checkout))


def __getattr__(name: str) -> Any:
    # The API pulls in the backends (llvmlite); load it on first use so `import swauto.ir` stays light.
    if name in ("Kernel", "Prepared", "choose", "compile", "schedules"):
        from swauto import api

        return getattr(api, name)
    if name in ("Model", "tune_model"):
        from swauto import models

        return getattr(models, name)
    raise AttributeError(f"module 'swauto' has no attribute {name!r}")
