"""The Sunway SW26010 target: the candidate as a program of primitive calls, run on a simulated core group."""

from swauto.backends.sw26010.codegen import emit_program
from swauto.backends.sw26010.simulator import Counters, simulate

__all__ = ["Counters", "emit_program", "simulate"]
