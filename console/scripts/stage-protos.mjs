// Stage the API protos for buf: ../protos/agentfeedback plus google/api/field_behavior.proto, which
// our protos import. The latter is taken from the Python `googleapis-common-protos` package in the
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
const fieldBehavior = execFileSync(
  python,
  ["-c", "import google.api.field_behavior_pb2 as m, pathlib; print(pathlib.Path(m.__file__).with_name('field_behavior.proto'))"],
  { encoding: "utf8" },
).trim();

rmSync(out, { recursive: true, force: true });
cpSync(join(repo, "protos", "agentfeedback"), join(out, "agentfeedback"), { recursive: true });
mkdirSync(join(out, "google", "api"), { recursive: true });
cpSync(fieldBehavior, join(out, "google", "api", "field_behavior.proto"));
console.log(`staged protos into ${out}`);
