"""tests/conftest.py's `fail_on_unhandled_loop_exceptions`: a test whose event loop reports an exception
nobody handled fails, even though its own assertions passed; a clean test passes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_unhandled_loop_exception_fails_the_test(tmp_path):
    (tmp_path / "test_probe.py").write_text(
        "import asyncio\n\n"
        "async def test_a_callback_raises_unobserved():\n"
        "    asyncio.get_running_loop().call_soon(lambda: 1 / 0)\n"
        "    await asyncio.sleep(0.01)\n\n"
        "async def test_clean():\n"
        "    await asyncio.sleep(0)\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          "--rootdir", str(tmp_path), "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
                          str(tmp_path / "test_probe.py")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "2 passed, 1 error" in out and "unhandled exception(s) in the event loop" in out
    assert "ZeroDivisionError" in out
