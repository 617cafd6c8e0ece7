"""Run test work in forked child processes, with a timeout per item, so a hang fails a test instead of
stalling CI.

Native code (a JIT-compiled host kernel spinning in a loop) cannot be interrupted by a signal handler in
the process that runs it: Python only runs handlers between bytecodes. So the work runs in a child forked
from the test process (`multiprocessing.get_context("fork")`: the child inherits every loaded module and
the host model's calibration, nothing is pickled on the way in). A child runs a batch of items one after
another and tells the parent, through a pipe, which item it is about to start, then sends its result (or
the traceback it raised). When an item runs longer than `timeout`, the parent kills the child, records the
item as hung and starts a new child for the rest of the batch; a child that dies (a signal, `os._exit`) is
recorded as crashed on the item it had started, and likewise replaced. Several children may share a batch
(`workers`), each taking every `workers`-th item. After `max_hangs` hangs the rest of the batch is not run
(each such item is reported as "skipped"), so a compiler that hangs everywhere fails a test in minutes.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

Item = TypeVar("Item")

DEFAULT_TIMEOUT = 60.0
_CONTEXT = multiprocessing.get_context("fork")


@dataclass
class Outcome:
    """What became of one item: `kind` is "ok" (then `value` is what the function returned), "error"
    (`detail` is the traceback), "hang" (killed after the timeout), "crash" (the child died) or "skipped"
    (not run: too many items of the batch had hung)."""

    index: int
    label: str
    kind: str
    value: Any = None
    detail: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def __str__(self) -> str:
        head = f"[{self.index}] {self.label}: {self.kind}"
        return f"{head}\n{self.detail}" if self.detail else head


def _child(function: Callable[[Any], Any], items: Sequence[Any], indices: Sequence[int], conn: Connection) -> None:
    """The child's loop: announce each item, run it, send its result or traceback."""
    for index in indices:
        conn.send(("start", index))
        try:
            value = function(items[index])
        except BaseException:  # noqa: B036 - everything, including SystemExit, goes back to the parent
            conn.send(("error", index, traceback.format_exc()))
        else:
            try:
                conn.send(("done", index, value))
            except Exception:  # the value cannot be pickled
                conn.send(("error", index, traceback.format_exc()))
    conn.send(("end",))
    conn.close()


@dataclass
class _Worker:
    """One child process and the part of the batch it still has to run."""

    process: Any
    conn: Connection
    pending: list[int]  # indices not finished yet, in the order the child runs them
    current: int | None = None
    started: float = 0.0


def run_isolated(function: Callable[[Item], Any], items: Sequence[Item], *, timeout: float = DEFAULT_TIMEOUT,
                 workers: int = 1, labels: Sequence[str] | None = None, max_hangs: int | None = None
                 ) -> list[Outcome]:
    """Run `function(item)` for every item in forked children (`workers` at a time), each item allowed
    `timeout` seconds; one Outcome per item, in the items' order. `function` and `items` reach the children
    by fork; what `function` returns comes back pickled. After `max_hangs` hangs, the rest is skipped."""
    labels = [str(i) for i in range(len(items))] if labels is None else list(labels)
    assert len(labels) == len(items), "one label per item"
    outcomes: dict[int, Outcome] = {}
    shares = [list(range(w, len(items), max(workers, 1))) for w in range(max(workers, 1))]
    running: list[_Worker] = [_start(function, items, share) for share in shares if share]
    try:
        while running:
            now = time.monotonic()
            deadline = min(worker.started + timeout for worker in running)
            ready = wait([worker.conn for worker in running], timeout=max(0.0, deadline - now))
            for worker in list(running):
                if worker.conn in ready:
                    replacement = _receive(worker, function, items, labels, outcomes)
                elif time.monotonic() - worker.started > timeout:
                    replacement = _hung(worker, function, items, labels, outcomes, timeout)
                else:
                    continue
                running.remove(worker)
                if replacement is not None:
                    running.append(replacement)
            hangs = sum(outcome.kind == "hang" for outcome in outcomes.values())
            if max_hangs is not None and hangs >= max_hangs:
                for worker in running:
                    _stop(worker)
                for index in range(len(items)):
                    outcomes.setdefault(index, Outcome(index, labels[index], "skipped",
                                                       detail=f"not run: {hangs} items of this batch hung"))
                running = []
    finally:
        for worker in running:  # only after an exception in the parent (e.g. KeyboardInterrupt)
            _stop(worker)
    return [outcomes[i] for i in range(len(items))]


def _start(function: Callable[[Any], Any], items: Sequence[Any], pending: list[int]) -> _Worker:
    parent, child = _CONTEXT.Pipe(duplex=False)
    process = _CONTEXT.Process(target=_child, args=(function, items, pending, child), daemon=True)
    process.start()
    child.close()
    return _Worker(process, parent, list(pending), started=time.monotonic())


def _stop(worker: _Worker) -> None:
    if worker.process.is_alive():
        worker.process.kill()
    worker.process.join()
    worker.conn.close()


def _receive(worker: _Worker, function: Callable[[Any], Any], items: Sequence[Any], labels: Sequence[str],
             outcomes: dict[int, Outcome]) -> _Worker | None:
    """Take every message the child has sent; the worker to keep running (itself, a replacement for a dead
    child, or None when its share is done)."""
    while worker.conn.poll():
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):  # the child died: the item it had started crashed it
            worker.process.join()
            code = worker.process.exitcode
            _stop(worker)
            if worker.current is None and not worker.pending:
                return None
            index = worker.current if worker.current is not None else worker.pending[0]
            outcomes[index] = Outcome(index, labels[index], "crash",
                                      detail=f"the child process died (exit code {code}) while running it",
                                      seconds=time.monotonic() - worker.started)
            rest = [i for i in worker.pending if i != index]
            return _start(function, items, rest) if rest else None
        now = time.monotonic()
        if message[0] == "start":
            worker.current, worker.started = message[1], now
        elif message[0] in ("done", "error"):
            index = message[1]
            kind, value, detail = ("ok", message[2], "") if message[0] == "done" else ("error", None, message[2])
            outcomes[index] = Outcome(index, labels[index], kind, value, detail, now - worker.started)
            worker.pending.remove(index)
            worker.current, worker.started = None, now
        else:  # "end"
            _stop(worker)
            return None
    return worker


def _hung(worker: _Worker, function: Callable[[Any], Any], items: Sequence[Any], labels: Sequence[str],
          outcomes: dict[int, Outcome], timeout: float) -> _Worker | None:
    """Kill a child past its timeout; the item it was running hung. A replacement runs the rest."""
    _stop(worker)
    if worker.current is None and not worker.pending:  # stuck on its way out, after its last item
        return None
    index = worker.current if worker.current is not None else worker.pending[0]
    what = "did not finish" if worker.current is not None else "was never started (the child was stuck before it)"
    outcomes[index] = Outcome(index, labels[index], "hang", detail=f"{what} within {timeout:g} s; the child was killed",
                              seconds=timeout)
    rest = [i for i in worker.pending if i != index]
    return _start(function, items, rest) if rest else None


def call_isolated(function: Callable[..., Any], *args: Any, timeout: float = DEFAULT_TIMEOUT,
                  label: str = "call") -> Any:
    """`function(*args)` in a forked child; its result, or AssertionError naming the hang, crash or error."""
    outcome = run_isolated(lambda packed: function(*packed), [args], timeout=timeout, labels=[label])[0]
    if not outcome.ok:
        raise AssertionError(str(outcome))
    return outcome.value
