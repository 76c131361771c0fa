// Stage the API protos for buf: ../protos/agentfeedback plus google/api/field_behavior.proto (our
// protos import it) and google/rpc/error_details.proto (ErrorInfo / BadRequest, read from errors by
// the console). Both are taken from the Python `googleapis-common-protos` package in the
// project's virtualenv (the same source scripts/gen_protos.py uses), so nothing is fetched from the
// Buf Schema Registry. Output: console/.proto-build/ (gitignored, recreated on every run).
//
// Usage: node scripts/stage-protos.mjs   (PYTHON=/path/to/python overrides ../.venv/bin/python)
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const consoleDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repo = resolve(consoleDir, "..");
const out = join(consoleDir, ".proto-build");
const python = process.env.PYTHON ?? join(repo, ".venv", "bin", "python");
if (!existsSync(python) && !process.env.PYTHON) {
  throw new Error(`no Python at ${python}: run \`make setup\` first, or set PYTHON to a Python with googleapis-common-protos`);
}
// site-packages/ (the directory holding google/api and google/rpc).
const googleRoot = execFileSync(
  python,
  ["-c", "import google.api.field_behavior_pb2 as m, pathlib; print(pathlib.Path(m.__file__).parents[2])"],
  { encoding: "utf8" },
).trim();
const deps = ["google/api/field_behavior.proto", "google/rpc/error_details.proto"];

rmSync(out, { recursive: true, force: true });
cpSync(join(repo, "protos", "agentfeedback"), join(out, "agentfeedback"), { recursive: true });
for (const dep of deps) {
  mkdirSync(dirname(join(out, dep)), { recursive: true });
  cpSync(join(googleRoot, dep), join(out, dep));
}
console.log(`staged protos into ${out}`);
