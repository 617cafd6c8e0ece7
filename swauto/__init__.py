"""swauto: a domain-specific tensor compiler for deep-learning operators.

The pipeline, one package each: `frontend` (grammar, parser, checks) -> `schedule` (the space of
candidates) -> `ir` and `passes` -> `tuner` (cost models) -> `backends` (sw26010 simulator, host JIT).
"""

from swauto.api import Kernel, compile, schedules
from swauto.errors import (
    ArgumentError,
    CheckError,
    CodegenError,
    ParameterError,
    ParseError,
    ScheduleError,
    SimulationError,
    SourceError,
    SwautoError,
)

__all__ = [
    "ArgumentError",
    "CheckError",
    "CodegenError",
    "Kernel",
    "ParameterError",
    "ParseError",
    "ScheduleError",
    "SimulationError",
    "SourceError",
    "SwautoError",
    "compile",
    "schedules",
]
__version__ = "0.1.0"
