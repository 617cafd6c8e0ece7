"""The tuning log: the candidate a tuner chose for an operator at given sizes, target and threads, kept
on disk (`tuning.jsonl` in the cache folder) so the same request is not tuned twice.

A record's key hashes the operator's source text, its bound parameters, the target, the tuner, the
thread count, swauto's own source and what the target measured of this machine (the host's calibration),
so editing the `.sw` file, changing swauto (its space, passes, models or backends) or a new calibration
(another CPU, `swauto calibrate`, or one measured apart while another program disturbed it) tunes afresh.

Records are JSON lines, each appended with one `write` on an O_APPEND descriptor (concurrent processes
never interleave them) and preceded by a newline (a line left torn by a crash or a full disk is ended
before the next record: nothing glues onto it). A lookup parses only the lines holding its key and skips
a damaged one (not UTF-8, not JSON, not an object, no `candidate`, a malformed candidate, a checksum of
key and candidate that does not match) with one `CacheWarning` per process and file; a log that cannot be
read or written means tuning without it.

Why JSON lines and not SQLite (`benchmarks/tuning_log_store.py`, this machine, 2 cores, ext4, 2026-11-23):
both lost no record with 16 and 64 concurrent writer processes (40 records each) nor with 40 writers
SIGKILLed at random moments among 16 (2,537 and 656-745 records acknowledged), and neither lost an earlier
record on a full file system (a 256 KiB tmpfs). JSON lines appended 30x faster (64 writers: 0.11 s against
1.9 s with SQLite's WAL and 3.4 s with its rollback journal). Damage is where they differ: one flipped bit
in a 200-record log cost JSON lines at most the one record it hit (199.4 of 200 readable on average over
20 trials), while SQLite kept 170 on average and 3 of 20 databases could not be read at all; 8 flipped
bits: 195 against 59-69 readable, 13-14 of 20 databases unreadable. SQLite's indexed lookup is faster
(0.1 ms against 1.3 ms at 10,000 records and 15 ms at 100,000 with this module's byte search), which is
small beside a compile. The log is a cache of what can be tuned again, read by people too: a format whose
damage stays local and that needs no recovery of a whole file wins.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from swauto.cache import cache_dir, warn_once, warn_unusable
from swauto.errors import SwautoError
from swauto.schedule.candidate import Candidate

LOG = "tuning.jsonl"
Record = tuple[str, dict[str, Any], dict[str, Any]]  # key, candidate (its JSON form), details
_listeners: list[list[Record]] = []  # `recorded` blocks open in this process


@contextlib.contextmanager
def recorded() -> Iterator[list[Record]]:
    """Within the block, every record this process appends to the log is listed too (key, candidate's
    JSON form, details), written or not: what a worker tuned, for a process that does not share its log
    (`swauto.models.tune.tune_layers`) to `record` again."""
    records: list[Record] = []
    _listeners.append(records)
    try:
        yield records
    finally:
        _listeners.remove(records)


def request_key(source_text: str, params: Mapping[str, int], target: str, tuner: str, threads: int,
                layouts: Sequence[Any] = (), calibration: str = "", operator: str = "",
                constants: Sequence[str] = ()) -> str:
    """The tuning log's key of a request: what decides its choice (`layouts`: the space's layout choices,
    which pinned layouts narrow; `calibration`: the target's measured constants, `Target.calibration`;
    `operator`: the operator's name, which tells the parts of a source split at its constants apart;
    `constants`: the tensors that do not change between calls, whose tiles a target may arrange once)."""
    request = [compiler_version(), source_text, sorted(params.items()), target, tuner, threads,
               [[choice.tensor, choice.permutations] for choice in layouts], calibration, operator, list(constants)]
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
    """The candidate of the last usable record for `key`, or None (also when the log cannot be read).
    Never raises for what is in the file: a damaged record (not UTF-8, not JSON, not an object, without a
    `candidate` or with a malformed one) is skipped, and said once per process and file as a `CacheWarning`."""
    path = _log(folder)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        warn_unusable(error, path.parent)
        return None
    needle = key.encode()
    found = None
    # Only the lines that hold the key are parsed: a lookup in a log of 100,000 records is a byte search.
    start = data.find(needle)
    while start >= 0:
        begin = data.rfind(b"\n", 0, start) + 1
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        try:
            record = json.loads(data[begin:end])
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            if record.get("key") == key:
                if record.get("check") != _check(key, record["candidate"]):
                    raise ValueError("its checksum does not match")  # a flipped digit can make another candidate
                found = Candidate.from_json(record["candidate"])
        # ValueError: not UTF-8 or not JSON; RecursionError: nested too deep; the others: a record of the
        # wrong shape, which Candidate.from_json reports as SwautoError
        except (ValueError, RecursionError, LookupError, TypeError, AttributeError, SwautoError) as error:
            line = data.count(b"\n", 0, begin) + 1
            warn_once("damaged", path, f"the tuning log {path} has a damaged record (line {line}: "
                                       f"{str(error)[:80] or type(error).__name__}); damaged records are skipped")
        start = data.find(needle, end)
    return found


def _check(key: str, candidate: Any) -> str:
    """A record's checksum: of its key and its candidate (as JSON)."""
    return hashlib.sha256(json.dumps([key, candidate], sort_keys=True).encode()).hexdigest()[:16]


def record(key: str, candidate: Candidate, details: Mapping[str, Any], folder: Path | None = None) -> None:
    """Append the choice for `key` (with `details` such as the predicted time, for people reading). Never
    raises for the file system: a log that cannot be written (read-only, not a folder, a full disk) is
    skipped, said once per process as a `CacheWarning`; the records already in it stay intact."""
    path = _log(folder)
    # The leading newline ends a line left torn by a crash or a full disk, so a record never glues onto one.
    choice = candidate.to_dict()
    for records in _listeners:
        records.append((key, choice, dict(details)))
    line = ("\n" + json.dumps({"key": key, "candidate": choice, "check": _check(key, choice), **details}) + "\n")
    line = line.encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # One write with O_APPEND: concurrent appends never interleave. Never completed by a second write,
            # which could land after another process's record.
            if os.write(handle, line) < len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        finally:
            os.close(handle)
    except OSError as error:
        warn_unusable(error, path.parent)
