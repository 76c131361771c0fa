"""`make test`'s system-package step (scripts/ensure_system_packages.sh): silent and fast when every
package is present; when one is missing and it cannot install (not root, or no apt-get), it stops at
once with one line naming the packages and the command that installs them."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from services.common.settings import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "ensure_system_packages.sh"


def test_present_packages_cost_nothing_and_print_nothing():
    t0 = time.monotonic()
    r = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == ("", "")
    assert elapsed < 1.0, f"{elapsed:.2f} s with everything installed"


def test_missing_packages_stop_with_one_line_naming_them_and_the_install_command(tmp_path: Path):
    # A PATH holding only what the script itself runs: chromium, WebKitWebDriver, xvfb-run, prometheus
    # and apt-get are "missing", so even as root it cannot install and must say so.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("uname", "id"):
        real = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        (bin_dir / tool).symlink_to(real)
    bash = subprocess.run(["bash", "-c", "command -v bash"], capture_output=True, text=True).stdout.strip()
    t0 = time.monotonic()
    r = subprocess.run([bash, str(SCRIPT)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PATH": str(bin_dir)})
    assert time.monotonic() - t0 < 1.0
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    for pkg in ("chromium", "webkit2gtk-driver", "xvfb", "prometheus"):
        assert pkg in lines[0].split(";")[0], lines[0]
    assert "apt-get install -y --no-install-recommends chromium webkit2gtk-driver xvfb" in lines[0]
