# agent-feedback — the two commands: `make run` (whole stack + the demo) and `make test`.
# Both set up everything they need on a fresh machine (virtualenv, generated protos, console build).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: setup proto run test lint bench clean console system-packages

setup: $(STAMP) gen/.stamp

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	touch $(STAMP)

# Generated code: gen/ (never committed, never edited). buf lint runs when buf is installed (console/ npm deps).
gen/.stamp: $(STAMP) $(shell find protos -name '*.proto') scripts/gen_protos.py
	@if [ -x console/node_modules/.bin/buf ]; then (cd console && PYTHON=../$(PY) npm run --silent lint:protos); fi
	$(PY) scripts/gen_protos.py
	touch gen/.stamp

# The console (console/): npm ci from the committed package-lock.json, TypeScript generated from protos/
# by buf + protoc-gen-es into console/src/gen, type check, Vite build into console/dist (static files).
CONSOLE_SRC := $(shell find console/src console/scripts -path console/src/gen -prune -o -type f -print 2>/dev/null) \
	console/index.html console/vite.config.ts console/tsconfig.json console/buf.gen.yaml

console: console/dist/.stamp

console/node_modules/.stamp: console/package.json console/package-lock.json
	cd console && npm ci --no-audit --no-fund
	touch $@

console/dist/.stamp: $(STAMP) console/node_modules/.stamp $(CONSOLE_SRC) $(shell find protos -name '*.proto')
	cd console && PYTHON=../$(PY) npm run build
	touch $@

proto: $(STAMP)
	rm -f gen/.stamp
	$(MAKE) gen/.stamp

# The main job: embedded PostgreSQL + every service, real ShareGPT conversations replayed through the
# gateway, one reply flagged, its evidence printed; then the stack keeps running until Ctrl-C.
run: setup console
	$(PY) -m services.cli.main run

# Debian packages the browser and Prometheus tests need (chromium, WebKitGTK driver + Xvfb, prometheus):
# installed when missing and running as root, else one line naming them and the install command.
system-packages:
	@scripts/ensure_system_packages.sh

# Static checks: ruff over the Python (pyproject [tool.ruff.lint]), the TypeScript checker over the console.
lint: setup console
	$(VENV)/bin/ruff check services tests scripts
	cd console && npm run --silent typecheck

test: system-packages setup console lint
	$(PY) -m pytest -q -p no:cacheprovider

bench: setup console
	$(PY) -m tests.bench.run

clean:
	rm -rf gen .bench .pytest_cache
