"""Evidence for the tuning log's storage: a JSON-lines file appended with O_APPEND against SQLite
(standard library `sqlite3`, rollback journal or WAL), under concurrent writer processes, SIGKILL at
random moments, damaged files, a full disk and growing logs.

    python benchmarks/tuning_log_store.py [--writers 16 64] [--records 40] [--kills 40] [--full-disk DIR]

`--full-disk` takes a small mounted file system (e.g. `mount -t tmpfs -o size=256k tmpfs DIR`).
Each store is implemented here the simplest correct way, independently of `swauto.tuner.database`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import sqlite3
import tempfile
import time
from pathlib import Path

PAYLOAD = {"candidate": {"splits": [["M", 128], ["N", 128], ["K", 64]], "order": ["M_outer", "N_outer", "K_outer"],
                         "vectorized": "N", "layouts": [], "double_buffer": True},
           "operator": "gemm", "params": {"M": 512, "N": 512, "K": 512}, "target": "host", "tuner": "model",
           "tuning_s": 1.25}


class JsonLines:
    def __init__(self, folder: Path, prefilter: bool = True) -> None:
        self.path = folder / "tuning.jsonl"
        self.prefilter = prefilter
        self.name = "jsonl" if prefilter else "jsonl-parse-every-line"

    def write(self, key: str) -> None:
        # A leading newline ends a torn last line: a record never glues onto one.
        line = "\n" + json.dumps({"key": key, **PAYLOAD}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def keys(self) -> tuple[set[str], int]:
        """(readable keys, damaged lines)."""
        keys, damaged = set(), 0
        for line in self.path.read_bytes().split(b"\n"):
            if not line:
                continue
            try:
                record = json.loads(line)
                keys.add(record["key"])
                record["candidate"]["splits"]
            except (ValueError, KeyError, TypeError):
                damaged += 1
        return keys, damaged

    def lookup(self, key: str) -> bool:
        found = False
        needle = key.encode()
        for line in self.path.read_bytes().split(b"\n"):
            if self.prefilter and needle not in line:
                continue  # parse only the lines that name the key (what swauto.tuner.database does)
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("key") == key:
                found = True
        return found


class Sqlite:
    def __init__(self, folder: Path, journal: str) -> None:
        self.path = folder / "tuning.sqlite"
        self.journal = journal
        self.name = f"sqlite-{journal.lower()}"

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        connection.execute(f"PRAGMA journal_mode={self.journal}")
        connection.execute("CREATE TABLE IF NOT EXISTS choice (key TEXT PRIMARY KEY, record TEXT NOT NULL)")
        return connection

    def write(self, key: str) -> None:
        connection = self._connect()
        try:
            with connection:
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("INSERT OR REPLACE INTO choice VALUES (?, ?)", (key, json.dumps(PAYLOAD)))
        finally:
            connection.close()

    def keys(self) -> tuple[set[str], int]:
        connection = self._connect()
        try:
            rows = connection.execute("SELECT key, record FROM choice").fetchall()
        finally:
            connection.close()
        keys, damaged = set(), 0
        for key, record in rows:
            try:
                json.loads(record)["candidate"]["splits"]
                keys.add(key)
            except (ValueError, KeyError, TypeError):
                damaged += 1
        return keys, damaged

    def lookup(self, key: str) -> bool:
        connection = self._connect()
        try:
            return connection.execute("SELECT record FROM choice WHERE key = ?", (key,)).fetchone() is not None
        finally:
            connection.close()


def stores(folder: Path) -> list:
    return [JsonLines(folder), Sqlite(folder, "DELETE"), Sqlite(folder, "WAL")]


def _writer(store, writer: int, records: int, done) -> None:
    for index in range(records):
        key = f"w{writer}-r{index}"
        store.write(key)
        if done is not None:
            done.put(key)  # reported only once the write returned: a record that must survive


def concurrent(store, writers: int, records: int) -> dict:
    """`writers` processes append `records` each at once: records lost, damaged, seconds."""
    started = time.perf_counter()
    processes = [multiprocessing.Process(target=_writer, args=(store, w, records, None)) for w in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    seconds = time.perf_counter() - started
    keys, damaged = store.keys()
    failed = sum(process.exitcode != 0 for process in processes)
    return {"lost": writers * records - len(keys), "damaged": damaged, "failed_writers": failed,
            "seconds": round(seconds, 2)}


def killed(store, writers: int, kills: int, rng: random.Random) -> dict:
    """`writers` processes append without end; one at a time is SIGKILLed at a random moment and replaced,
    `kills` times. Every record a writer reported written must be readable afterwards."""
    done = multiprocessing.Queue()
    processes = {}
    serial = 0

    def start() -> None:
        nonlocal serial
        process = multiprocessing.Process(target=_writer, args=(store, serial, 10 ** 9, done))
        process.start()
        processes[serial] = process
        serial += 1

    for _ in range(writers):
        start()
    for _ in range(kills):
        time.sleep(rng.uniform(0.0, 0.05))
        victim = rng.choice(list(processes))
        os.kill(processes.pop(victim).pid, signal.SIGKILL)
        start()
    for process in processes.values():
        os.kill(process.pid, signal.SIGKILL)
    for process in multiprocessing.active_children():
        process.join()
    reported = set()
    while not done.empty():
        reported.add(done.get())
    keys, damaged = store.keys()
    return {"reported": len(reported), "lost": len(reported - keys), "damaged": damaged}


def damaged(store_class, records: int, flips: int, rng: random.Random, trials: int) -> dict:
    """Flip `flips` random bytes of a log of `records` records: records still readable (mean, worst),
    and how often the store could not be read at all."""
    readable, unreadable = [], 0
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as folder:
            store = store_class(Path(folder))
            for index in range(records):
                store.write(f"k{index}")
            data = bytearray(store.path.read_bytes())
            for _ in range(flips):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            store.path.write_bytes(bytes(data))
            try:
                readable.append(len(store.keys()[0]))
            except sqlite3.DatabaseError:
                readable.append(0)
                unreadable += 1
    return {"mean_readable": sum(readable) / trials, "worst": min(readable), "unreadable": unreadable,
            "of": records}


def lookup_cost(store, records: int) -> float:
    """Milliseconds per lookup (a new connection or a read of the file each time, as a compile does)."""
    for index in range(records):
        store.write(f"k{index}") if records < 2000 else None
    if records >= 2000:  # bulk fill
        if isinstance(store, JsonLines):
            with open(store.path, "w") as log:
                for index in range(records):
                    log.write("\n" + json.dumps({"key": f"k{index}", **PAYLOAD}) + "\n")
        else:
            connection = store._connect()
            with connection:
                connection.execute("BEGIN")
                connection.executemany("INSERT OR REPLACE INTO choice VALUES (?, ?)",
                                       ((f"k{index}", json.dumps(PAYLOAD)) for index in range(records)))
            connection.close()
    runs = 20
    started = time.perf_counter()
    for index in range(runs):
        store.lookup(f"k{index * 7}")
    return 1000 * (time.perf_counter() - started) / runs


def full_disk(store, folder: Path) -> dict:
    """Append to a log on a small file system until it is full: records readable against records whose
    write returned without error; and whether the store still reads."""
    written, errors = 0, 0
    for index in range(100000):
        try:
            store.write(f"k{index}")
            written += 1
        except (OSError, sqlite3.Error):
            errors += 1
            if errors >= 20:
                break
    try:
        keys, damaged = store.keys()
        result = {"written": written, "readable": len(keys), "damaged": damaged}
    except (OSError, sqlite3.Error) as error:
        result = {"written": written, "readable": 0, "error": str(error)}
    for path in folder.iterdir():
        path.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--records", type=int, default=40)
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--full-disk", type=Path)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--parts", default="concurrent,kill,damage,lookup,full-disk")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    parts = args.parts.split(",")
    for writers in args.writers if "concurrent" in parts else []:
        for index in range(3):
            with tempfile.TemporaryDirectory() as folder:
                store = stores(Path(folder))[index]
                print(f"concurrent {writers} writers x {args.records} records", store.name,
                      concurrent(store, writers, args.records), flush=True)
    for index in range(3) if "kill" in parts else []:
        with tempfile.TemporaryDirectory() as folder:
            store = stores(Path(folder))[index]
            print(f"SIGKILL {args.kills} of 16 writers", store.name, killed(store, 16, args.kills, rng), flush=True)
    for flips in (1, 8) if "damage" in parts else ():
        print(f"{flips} flipped bits, 200 records", "jsonl", damaged(JsonLines, 200, flips, rng, 20), flush=True)
        for journal in ("DELETE", "WAL"):
            print(f"{flips} flipped bits, 200 records", f"sqlite-{journal.lower()}",
                  damaged(lambda folder, journal=journal: Sqlite(folder, journal), 200, flips, rng, 20), flush=True)
    for records in (100, 10000, 100000) if "lookup" in parts else ():
        for index in range(4):
            with tempfile.TemporaryDirectory() as folder:
                store = [*stores(Path(folder)), JsonLines(Path(folder), prefilter=False)][index]
                print(f"lookup in {records} records", store.name, f"{lookup_cost(store, records):.2f} ms", flush=True)
    if args.full_disk and "full-disk" in parts:
        for store in stores(args.full_disk):
            print("full disk", store.name, full_disk(store, args.full_disk), flush=True)


if __name__ == "__main__":
    main()
