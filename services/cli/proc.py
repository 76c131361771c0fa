"""Child processes of the local stack (services, Envoy, the console's static server)."""
from __future__ import annotations

import shutil


def pdeathsig_argv() -> list[str]:
    """The argv prefix that has Linux SIGTERM a child when its parent dies, even by SIGKILL, so a killed
    `make run` never leaves services or Envoy holding their ports: util-linux's `setpriv --pdeathsig TERM --`
    (prctl PR_SET_PDEATHSIG, kept across exec; setpriv execs the command in place, so the pid is the
    child's). The program sets it, not a Popen `preexec_fn`: Python code between fork and exec in a parent
    whose other threads (gRPC's) hold locks can crash the child, as CI saw (Envoy's start ended by SIGSEGV
    before Envoy logged a line), and without a preexec_fn subprocess forks without running Python at all.
    Empty where setpriv is missing (the child then outlives a killed parent); a parent killed before
    setpriv has run leaves the child running too (PR_SET_PDEATHSIG is not yet set)."""
    path = shutil.which("setpriv")
    return [path, "--pdeathsig", "TERM", "--"] if path else []
