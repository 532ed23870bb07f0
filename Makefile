# gpuops.cluster developer entry points. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3) $(shell command -v python3.12) python3)
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(CURDIR)/.cache/pythons:$(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
SCENARIO ?= default
# Hosts of the window strategy's benchmark under `make bench BENCH_FLEET=1` (issue 17's fleet size).
BENCH_FLEET_HOSTS ?= 1250

.PHONY: help venv units integration integration-beside lint sanity test bench build docs lab lab-down molecule molecules clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-19s %s\n", $$1, $$2}'

$(VENV)/.stamp: requirements.txt
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 12), "ansible-core 2.21 needs Python >= 3.12: set PYTHON="'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $@

venv: $(VENV)/.stamp ## create .venv with the pinned controller requirements

units: venv ## pytest: module_utils, filters, modules, matrix schema
	$(BIN)/pytest -q tests/unit

integration: venv ## playbooks end to end through ansible-runner (no hosts changed)
	$(BIN)/pytest -q tests/integration

lint: venv ## ruff, yamllint, ansible-lint (production), changelog and plugin docs lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint -q
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-docs lint-collection-docs --plugin-docs .

sanity: venv ## ansible-test sanity on a copy at ansible_collections/gpuops/cluster
	tests/tooling/sanity.sh

test: lint sanity units ## everything CI runs: the integration tests beside the molecule lanes
	$(MAKE) --no-print-directory -j2 integration-beside molecules

integration-beside: venv ## the integration tests at nice 10, output printed whole when they end (the lanes' lines stream)
	@log=$$(mktemp); rc=0; nice -n 10 $(BIN)/pytest -q tests/integration >"$$log" 2>&1 || rc=$$?; cat "$$log"; rm -f "$$log"; exit $$rc

molecules: venv ## every CI scenario, in the lanes of extensions/molecule/ci-scenarios.txt
	extensions/molecule/lab/bin/lab-lanes

molecule: venv ## run one molecule scenario: make molecule SCENARIO=<name>
	extensions/molecule/lab/bin/lab-prepare
	$(BIN)/molecule test -s $(SCENARIO)

lab: venv ## build the lab from nothing and run site.yml against it
	extensions/molecule/lab/bin/lab-prepare
	extensions/molecule/lab/bin/lab-up

lab-down: ## remove the lab nodes
	extensions/molecule/lab/bin/lab-down

bench: venv ## benchmarks (figures, not timed tests): tests/benchmarks/bench_*.py; BENCH_LAB=1 adds the lab runs, BENCH_FLEET=1 the window strategy at fleet size
	@for b in tests/benchmarks/bench_*.py; do \
	  args=; \
	  case $$b in \
	    *_rolling_upgrade.py|*_site_rerun.py) [ -n "$(BENCH_LAB)" ] || { echo "== $$b: needs the lab; make bench BENCH_LAB=1"; continue; };; \
	    *_window_strategy.py) [ -n "$(BENCH_FLEET)" ] || { echo "== $$b: $(BENCH_FLEET_HOSTS) hosts, tens of minutes; make bench BENCH_FLEET=1"; continue; }; args=$(BENCH_FLEET_HOSTS);; \
	  esac; \
	  echo "== $$b$${args:+ $$args}"; $(BIN)/python $$b $$args || exit 1; done

build: venv ## ansible-galaxy collection build into build/
	mkdir -p build
	$(BIN)/ansible-galaxy collection build --force --output-path build .

docs: venv ## render every plugin's documentation
	tests/tooling/render-docs.sh

.PHONY: matrix-gap
matrix-gap: venv ## what a repository index holds that the matrix lacks: INDEX=<path> [MATRIX= JSON= FAIL_ON_GAP=1]
	@[ -n "$(INDEX)" ] || { echo "make matrix-gap: give INDEX=<path> (an apt Packages file, a repository directory with repodata/, a primary.xml, or saved apt-cache madison/policy or dnf repoquery output)" >&2; exit 2; }
	$(BIN)/python tools/matrix_gap.py "$(INDEX)" $(if $(MATRIX),--matrix "$(MATRIX)") $(if $(JSON),--json "$(JSON)") $(if $(FAIL_ON_GAP),--fail-on-gap)

clean: ## remove build outputs (keeps .venv)
	rm -rf build tests/output .pytest_cache .ruff_cache
