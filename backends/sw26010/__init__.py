"""The Sunway SW26010 target: the candidate as a program of primitive calls, run on a simulated core group
(functional with real data, `simulate`; or timing only, `time_module`)."""

from swauto.backends.sw26010.codegen import emit_program
from swauto.backends.sw26010.simulator import Counters, simulate
from swauto.backends.sw26010.timing import Timing, gemm_cycles, time_module

__all__ = ["Counters", "Timing", "emit_program", "gemm_cycles", "simulate", "time_module"]
