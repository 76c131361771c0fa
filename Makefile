# agent-feedback — the two commands: `make run` (whole stack + the demo) and `make test`.
# Both set up everything they need on a fresh machine (virtualenv, generated protos, console build).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: setup proto run demo test test-fast bench lint clean console

setup: $(STAMP) gen/.stamp

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	touch $(STAMP)

# Generated code: gen/ (never committed, never edited). buf lint runs when buf is installed (console/ npm deps).
gen/.stamp: $(STAMP) $(shell find protos -name '*.proto') scripts/gen_protos.py
	@if [ -x console/node_modules/.bin/buf ]; then (cd protos && ../console/node_modules/.bin/buf lint); fi
	$(PY) scripts/gen_protos.py
	touch gen/.stamp

proto: $(STAMP)
	rm -f gen/.stamp
	$(MAKE) gen/.stamp

# The main job: embedded PostgreSQL + every service, real ShareGPT conversations replayed through the
# gateway, one reply flagged, its evidence printed; then the stack keeps running until Ctrl-C.
run: setup
	$(PY) -m services.cli.main run

test: setup
	$(PY) -m pytest -q -p no:cacheprovider

bench: setup
	$(PY) -m tests.bench.run

clean:
	rm -rf gen .bench .pytest_cache
