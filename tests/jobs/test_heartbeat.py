"""`heartbeat`: a line at least every `every` seconds while its block runs, none after, and one heartbeat's lines only
when one runs inside another (a release's stage that beats on its own)."""

from __future__ import annotations

import re
import time

from insub_hf.jobs.heartbeat import heartbeat


def beats(printed: str, job: str) -> list[int]:
    return [int(s) for s in re.findall(rf"^\[{re.escape(job)}\] still running: (\d+) s$", printed, re.M)]


def test_a_block_that_runs_says_so_every_interval_and_stops_with_the_block(capsys):
    with heartbeat("job", every=0.1):
        time.sleep(0.55)
    time.sleep(0.3)  # nothing is printed once the block is over
    printed = capsys.readouterr().out
    assert 2 <= len(beats(printed, "job")) <= 5, printed  # 5 on a quiet machine; a busy one wakes the thread late
    assert printed.count("\n") == len(beats(printed, "job"))


def test_a_heartbeat_inside_another_adds_no_lines_and_the_next_one_beats_again(capsys):
    with heartbeat("outer", every=0.1):
        with heartbeat("inner", every=0.05):
            time.sleep(0.35)
    printed = capsys.readouterr().out
    assert beats(printed, "outer") and not beats(printed, "inner"), printed
    with heartbeat("inner", every=0.05):  # the outer one is over: this one is the only one
        time.sleep(0.2)
    assert beats(capsys.readouterr().out, "inner")
