# The README's two Quickstart commands live here: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export DAGSTER_HOME := $(CURDIR)/.dagster_home

.PHONY: install lock browser services demo test check docs dev validate clean-lake

LOCK := requirements/dev.txt

## install: .venv from the lock (every pin hashed; torch's CPU build), after checking it matches pyproject.toml
$(VENV)/.installed: pyproject.toml $(LOCK) requirements/no-deps.txt
	python3 -m peerify_dagster.lockfile check
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install -q --require-hashes --no-deps -r requirements/no-deps.txt
	# the project itself, editable; its build backend (setuptools) came with the lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

install: $(VENV)/.installed

## lock: re-resolve every lock under requirements/ from pyproject.toml (pip-tools in .venv-lock; needs the registry)
lock:
	test -x .venv-lock/bin/pip-compile || { python3 -m venv .venv-lock && .venv-lock/bin/pip install -q pip-tools==7.6.2; }
	python3 -m peerify_dagster.lockfile compile --pip-compile .venv-lock/bin/pip-compile --pip .venv-lock/bin/pip

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

## demo: install, then materialise the whole asset graph for the bundled `sample` venue (offline)
demo: install $(DAGSTER_HOME)/dagster.yaml
	$(VENV)/bin/peerify build sample

## browser: Debian's chromium for the web app's browser tests (Playwright drives it; it never downloads one)
browser:
	command -v chromium >/dev/null || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

## services: Debian's redis-server and postgresql for `peerify cluster up` and the cluster tests (both start their own
## servers on loopback)
services:
	command -v redis-server >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q redis-server postgresql; }

## test: install, then run the test suite in two worker processes, one per core (pytest-xdist; a module's tests stay
## in one worker, so its module-scoped builds are made once)
test: install browser services
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q -n 2 --dist loadfile

## check: the linter and the fast unit tests (the domain's pure logic, the house's rules, the locks, the docs; under 3
## minutes on 2 cores): run it before each commit, `make test` before a push
FAST_TESTS := $(addprefix tests/,test_architecture.py test_catalog_views.py test_lockfile.py test_docs.py \
  test_prompts.py test_release_diff.py test_chunking.py test_claims.py test_labelling.py test_label_metrics.py \
  test_retrieval_metrics.py test_sampling.py test_citation_detection.py test_bibliography.py test_gold_evidence.py \
  test_predictions.py test_forum_tables.py test_table_gates.py test_paper_claims.py test_claim_view.py \
  test_decisions_ledger.py test_opaque_ids.py test_audit_stats.py test_citation_metrics.py test_positions.py \
  test_code_versions.py::test_the_analysis_follows_aliases_and_re_exports_and_keeps_parameters_apart)
check: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q -n 2 $(FAST_TESTS)

## docs: the reference pages generated from the code, then the site built with every link and anchor checked
docs: install
	$(VENV)/bin/peerify docs generate
	$(VENV)/bin/mkdocs build --strict --quiet
	@echo "docs: site/index.html"

## dev: the Dagster UI with the asset graph; `peerify recover` first fails runs whose process died, frees their slots
dev: install $(DAGSTER_HOME)/dagster.yaml
	$(VENV)/bin/peerify recover
	$(VENV)/bin/dagster dev -w workspace.yaml

validate: install
	$(VENV)/bin/dagster definitions validate -w workspace.yaml

## clean-lake: remove what a build makes again from the lake; human decisions, releases, the LLM call ledger, crawl
## snapshots and verify's uploads stay unless named: `make clean-lake ALSO=decisions,releases,ledger,snapshots,uploads`
## (any of them)
comma := ,
clean-lake: install
	$(VENV)/bin/peerify clean-lake $(addprefix --also-,$(subst $(comma), ,$(ALSO)))
