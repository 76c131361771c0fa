"""Regenerate the Python code for protos/ into gen/ (never edited by hand, never committed).

Usage: python scripts/gen_protos.py   (what `make proto` runs)
Output: gen/agentfeedback/<svc>/v1/*_pb2.py, *_pb2.pyi, *_pb2_grpc.py; the tree's path equals the
proto package, so `import agentfeedback.chat.v1.chat_pb2` works with gen/ on sys.path (a .pth file
written into the virtualenv by the same script puts it there).
"""
from __future__ import annotations

import shutil
import site
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
GEN = ROOT / "gen"


def _googleapis_include() -> str:
    # googleapis-common-protos ships google/api/*.proto next to its generated modules.
    import google.api.field_behavior_pb2 as fb  # noqa: PLC0415

    return str(Path(fb.__file__).resolve().parent.parent.parent)


def main() -> int:
    if GEN.exists():
        shutil.rmtree(GEN)
    GEN.mkdir()
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{_googleapis_include()}",
        f"-I{well_known}",
        f"--python_out={GEN}",
        f"--pyi_out={GEN}",
        f"--grpc_python_out={GEN}",
        *files,
    ]
    rc = protoc.main(args)
    if rc != 0:
        print(f"protoc failed ({rc})", file=sys.stderr)
        return rc
    # Make gen/ importable for every process of this virtualenv (entry points included).
    for sp in site.getsitepackages():
        if Path(sp).is_dir() and sys.prefix in sp:
            (Path(sp) / "agentfeedback-gen.pth").write_text(str(GEN) + "\n")
            break
    print(f"generated {len(files)} proto files into {GEN}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
