"""A line at least every `HEARTBEAT_SECONDS` while a long job runs (`heartbeat`): stages that print nothing for
minutes (a 10-fold transfer, a bank's embedding) no longer look hung."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

# The longest a job stays silent
HEARTBEAT_SECONDS = 30.0
# The heartbeats running now: one inside another stays quiet, so a stage of a job that beats says each line once
_running: list[str] = []


@contextmanager
def heartbeat(job: str, every: float | None = None):
    """While the block runs, prints `[job] still running: N s` every `every` seconds (default `HEARTBEAT_SECONDS`),
    from a daemon thread that stops with the block; inside another heartbeat's block it adds none."""
    if _running:
        yield
        return
    every = HEARTBEAT_SECONDS if every is None else every
    stop, start = threading.Event(), time.time()

    def beat() -> None:
        while not stop.wait(every):
            print(f"[{job}] still running: {time.time() - start:.0f} s", flush=True)

    thread = threading.Thread(target=beat, name=f"{job} heartbeat", daemon=True)
    _running.append(job)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _running.remove(job)
