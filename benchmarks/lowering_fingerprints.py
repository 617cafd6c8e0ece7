"""Fingerprints of every candidate's final IR over a few spaces, to show that a compiler change leaves
the generated programs as they were (or which ones it changed).

    python benchmarks/lowering_fingerprints.py write before.json      # at the old commit
    python benchmarks/lowering_fingerprints.py write after.json       # at the new one
    python benchmarks/lowering_fingerprints.py compare before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from swauto.api import load
from swauto.ir.nodes import Module
from swauto.ir.printer import format_module
from swauto.machine import local_memory_machine

try:
    from swauto.tuner.space import explore
except ImportError:  # commits before the space driver moved to the tuner package
    from swauto.schedule.space import explore

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SPACES = [
    ("conv2d.sw", {"B": 32, "Ni": 256, "No": 256, "Ri": 28, "Ci": 28}),
    ("conv2d.sw", {"B": 1, "Ni": 64, "No": 64, "Ri": 56, "Ci": 56}),
    ("gemm.sw", {"M": 1024, "N": 1024, "K": 1024}),
]


def fingerprint(module: Module) -> str:
    """A hash of the printed IR (`format_module`), not of its `repr`: the printed form stays the same
    when the IR's node classes change (Gemm became a generic Call in 554165f), and this script imports
    nothing that only newer commits have, so one copy of it runs at old and new commits alike."""
    return hashlib.sha256(format_module(module).encode()).hexdigest()[:16]


def fingerprints() -> dict[str, str]:
    """Candidate (file, sizes, target, id) -> fingerprint of its final IR, printed, on both targets."""
    found = {}
    for name, params in SPACES:
        for target in ("sw26010", "host"):
            space = explore(load(EXAMPLES / name, params), local_memory_machine(target))
            for candidate, stages in space.legal:
                found[f"{name} {sorted(params.items())} {target} {candidate.id}"] = fingerprint(stages[-1][1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("write").add_argument("file", type=Path)
    compare = commands.add_parser("compare")
    compare.add_argument("before", type=Path)
    compare.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        args.file.write_text(json.dumps(fingerprints(), indent=0))
        return
    before, after = json.loads(args.before.read_text()), json.loads(args.after.read_text())
    changed = sorted(key for key in before.keys() & after.keys() if before[key] != after[key])
    print(f"{len(before)} and {len(after)} candidates; only before: {len(before.keys() - after.keys())}, "
          f"only after: {len(after.keys() - before.keys())}, final IR changed: {len(changed)}")
    for key in changed[:20]:
        print("  changed:", key)


if __name__ == "__main__":
    main()
