"""The SW26010 model against the timed simulator on the operators of several statements: predicted over
simulated time for a spread sample of each space, by fusion and buffering.

`python operators_model.py [--sample N]` prints, per operator and group, the count and the median,
least and largest ratio.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from swauto import targets
from swauto.api import load
from swauto.backends.sw26010 import time_module
from swauto.machine import SUNWAY
from swauto.tuner.space import explore

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
OPERATORS = {"fc_bias_relu": {}, "conv2d_bias_relu": {"B": 32, "Ni": 64, "No": 64, "Ri": 14, "Ci": 14}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=40, help="candidates per operator (spread over the space)")
    args = parser.parse_args()
    target = targets.get("sw26010")
    for name, params in OPERATORS.items():
        space = explore(load(EXAMPLES / f"{name}.sw", params), target.machine())
        groups: dict[tuple[bool, bool], list[float]] = {}
        for candidate, stages in space.legal[:: max(1, len(space.legal) // args.sample)]:
            ratio = target.estimate(stages, 1).seconds / time_module(stages[-1][1], SUNWAY).seconds
            groups.setdefault((bool(candidate.fused), candidate.double_buffer), []).append(ratio)
        for (fused, double), ratios in sorted(groups.items()):
            print(f"{name} {'fused' if fused else 'apart'} {'double' if double else 'single'}: {len(ratios)} "
                  f"candidates, predicted / simulated median {statistics.median(ratios):.3f}, "
                  f"min {min(ratios):.3f}, max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
