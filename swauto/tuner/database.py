"""The tuning log: the candidate a tuner chose for an operator at given sizes, target and threads, kept
on disk (`tuning.jsonl` in the cache folder) so the same request is not tuned twice.

A record's key hashes the operator's source text, its bound parameters, the target, the tuner, the
thread count and swauto's own source, so editing the `.sw` file or changing swauto (its space, passes,
models or backends) tunes afresh.
Records are JSON lines appended with one write each: concurrent processes never interleave them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from swauto.cache import cache_dir
from swauto.schedule.candidate import Candidate

LOG = "tuning.jsonl"


def request_key(source_text: str, params: Mapping[str, int], target: str, tuner: str, threads: int) -> str:
    request = [compiler_version(), source_text, sorted(params.items()), target, tuner, threads]
    return hashlib.sha256(json.dumps(request).encode()).hexdigest()[:32]


@cache
def compiler_version() -> str:
    """A hash of the source of every module of swauto and its backends."""
    import swauto
    import swauto.backends

    digest = hashlib.sha256()
    for folder in sorted({Path(swauto.__file__).parent, *map(Path, swauto.backends.__path__)}):
        for path in sorted(folder.rglob("*.py")):
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _log(folder: Path | None) -> Path:
    return (folder or cache_dir()) / LOG


def lookup(key: str, folder: Path | None = None) -> Candidate | None:
    """The candidate recorded last for `key`, or None."""
    path = _log(folder)
    if not path.exists():
        return None
    found = None
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash: ignore it
        if record.get("key") == key:
            found = record
    return None if found is None else Candidate.from_json(found["candidate"])


def record(key: str, candidate: Candidate, details: Mapping[str, Any], folder: Path | None = None) -> None:
    """Append the choice for `key` (with `details` such as the predicted time, for people reading)."""
    path = _log(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"key": key, "candidate": candidate.to_dict(), **details}) + "\n"
    with open(path, "a") as log:  # one write of one line with O_APPEND: atomic with respect to others
        os.write(log.fileno(), line.encode())
