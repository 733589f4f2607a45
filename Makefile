# Two commands on a fresh machine:  make run  (server + demo fleet)  and  make test  (the whole suite).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench clean bytecode agent

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

## Bytecode of forewarn's own modules, written ahead: where PYTHONDONTWRITEBYTECODE is set (as on CI machines),
## every process would otherwise compile them again, about 0.5 s of each server's start (and a test suite starts
## many). compileall writes only what changed.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q src >/dev/null

## make run: serve the demo fleet on the embedded SQLite store (var/demo.db), real clock.
run: bytecode
	mkdir -p var
	$(BIN)/forewarn serve --fleet demo --db var/demo.db $(ARGS)

## make test: install test dependencies and run the whole suite (PostgreSQL at 127.0.0.1:5432, database test), on
## PYTEST_WORKERS processes (pytest-xdist; each test file stays on one worker, so a module's server is started once).
## Three on two cores: much of the suite waits (timeouts, failovers, browsers, battery cases), and a third worker fills
## that time. --no-loadscope-reorder keeps the files in collection order, which tests/conftest.py sets longest first
## (xdist would otherwise hand out the files with the most tests first, and the one-test batteries last).
PYTEST_WORKERS ?= 3
test: bytecode
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

## make lint: ruff (lint and format) and mypy, as CI runs them (scripts/check).
lint: $(STAMP)
	VENV=$(VENV) scripts/check

## make bench: IMDS GET against nginx serving the same bytes (installs nginx and wrk with apt), and
## DescribeInstanceStatus over 1,000 instances against moto (installs moto into the venv), a wave over
## 10,000 to 100,000 VMs on the manual clock, Resource Graph queries over 1,000,000 events, and Event Grid
## delivery to a local webhook with and without batching, durable commands (approvals through the metadata POST,
## schedules through the control API, on SQLite and PostgreSQL), and the start-up cost of the forewarn command.
## Each script takes --check: a small, fast run that fails on a broken setup only (tests/test_bench_checks.py).
bench: bytecode
	$(BIN)/python bench/imds_vs_nginx.py
	$(BIN)/python bench/ec2_vs_moto.py
	$(BIN)/python bench/wave.py
	$(BIN)/python bench/resource_graph_query.py
	$(BIN)/python bench/eventgrid_delivery.py
	$(BIN)/python bench/commands.py
	$(BIN)/python bench/startup.py

## make agent: forewarn-agent as one executable file, dist/forewarn-agent.pyz (a zipapp for any python3 >= 3.8;
## docs/agent.md). It needs nothing installed: the standard library's zipapp builds it.
agent:
	$(PYTHON) agent/build.py

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
