"""The suite's own limits, as setup.cfg sets them for the README's test command: a test that runs past the per-test
timeout fails alone, with the stacks, and the run goes on to the next test and its summary."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_test_past_the_timeout_fails_alone_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_slow.py").write_text(
        "import time\n\n"
        "def test_slow():\n    time.sleep(30)\n\n"
        "def test_after():\n    assert True\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "setup.cfg"),
         "--rootdir", str(tmp_path), "-o", "timeout=2", str(tmp_path / "test_slow.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    lines = done.stdout.strip().splitlines()
    assert "1 failed, 1 passed" in lines[-1], done.stdout[-3000:]
    assert "Timeout (>2.0s) from pytest-timeout" in done.stdout and "time.sleep(30)" in done.stdout
