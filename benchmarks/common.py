"""Helpers shared by the benchmarks: the header line (machine, date, command), CSV and
Markdown tables in benchmarks/results/."""

from __future__ import annotations

import csv
import datetime
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def header() -> str:
    """The command, the date, this machine (the simulator's host) and its core count."""
    command = "python " + " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv))
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    when = datetime.datetime.now().isoformat(timespec="seconds")
    return f"`{command}` — {when}  {cpu}  {os.cpu_count()} cores  Python {platform.python_version()}"


def write_tables(name: str, fields: Sequence[str], rows: Sequence[dict], title: str, notes: str = "") -> None:
    """benchmarks/results/NAME.csv (all fields) and NAME.md (the header line, notes, a table)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / f"{name}.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# {title}", "", header(), ""]
    if notes:
        lines += [notes, ""]
    lines.append("| " + " | ".join(fields) + " |")
    lines.append("|" + "---|" * len(fields))
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(f, "")) for f in fields) + " |")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
