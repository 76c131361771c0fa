"""Child processes of the local stack (services, Envoy, the console's static server)."""
from __future__ import annotations

import signal


def die_with_parent() -> None:
    """Use as `subprocess.Popen(..., preexec_fn=die_with_parent)`: in the child, before exec, ask
    Linux to SIGTERM it when its parent dies, even by SIGKILL (prctl PR_SET_PDEATHSIG), so a killed
    `make run` never leaves services or Envoy holding their ports. A no-op where prctl is missing."""
    import ctypes  # noqa: PLC0415

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
