"""Waiting for a quiet core before timing it.

On a virtual machine the core a process runs on can share its physical core with another tenant's thread
for seconds at a time. On the Zen 3 guest this was written on, a map on tiles in L1 ran at 133 - 141 GB/s
or at 55 - 70, switching every one to five seconds, each core on its own; the micro-kernel at about 92 or
74 GFLOPS; copies within L2 at 32 or 22 GB/s; the in-register FMA loop barely changed. A calibration of a
few seconds measured some of its constants in one state and some in the other, so their ratios (what
the model's picks turn on) moved from one calibration to the next.

A `QuietCore` reads a short probe of such a rate, remembers the fastest reading, and lets a measurement
start only while the probe reads at least `QUIET_FRACTION` of it, waiting (up to a budget per pass of a calibration)
while it does not. Every constant is then measured in the same state, the quiet one, wherever the machine
gives one within the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# The two states differed by 1.3 - 2.3x in the rates that load from L1; readings of one state stayed
# within about 10% of each other.
QUIET_FRACTION = 0.8
# What waiting may take in all, per pass of a calibration over its constants (about 4 s of measuring): the
# busy state lasted up to about five seconds at a time, and 8 s for a whole calibration ran out in four of
# seven.
WAIT_SECONDS = 15.0
PAUSE_SECONDS = 0.002  # between readings while waiting


@dataclass
class QuietCore:
    """A gate for measurements on the calling thread's core: `probe()` reads a rate of the core in a fraction
    of a millisecond (higher: quieter); `budget` is the seconds `wait` may still spend. Without a probe
    nothing is gated: `wait` returns False at once and `quiet` True."""

    probe: Callable[[], float] | None = None
    budget: float = WAIT_SECONDS
    fastest: float = 0.0

    def quiet(self) -> bool:
        """Whether the probe reads at least `QUIET_FRACTION` of the fastest reading so far (this one included)."""
        if self.probe is None:
            return True
        rate = self.probe()
        self.fastest = max(self.fastest, rate)
        return rate >= QUIET_FRACTION * self.fastest

    def wait(self) -> bool:
        """Return once the core reads quiet, True, or once the budget is spent, False (then at once)."""
        if self.probe is None or self.budget <= 0:
            return False
        started = time.perf_counter()
        while not self.quiet():
            if time.perf_counter() - started >= self.budget:
                self.budget = 0.0
                return False
            time.sleep(PAUSE_SECONDS)
        self.budget -= time.perf_counter() - started
        return True
