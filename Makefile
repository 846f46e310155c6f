# specwatch: the two commands a newcomer needs are `make demo` and `make test` (CONTRIBUTING.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test unit durations lint format system-deps tools clean mixin bench validate-deploy dashboard-pictures

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# setuptools explains editable installs at length on every first install: not news to anyone.
$(STAMP): pyproject.toml | $(BIN)/python
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e '.[dev,report]'
	touch $(STAMP)

# The Debian tools the end-to-end tests run, Prometheus 2 (the floor) among them.
system-deps:
	@bash scripts/install-system-deps.sh

# Prometheus 3.5 LTS, promtool, Alertmanager and amtool, pinned, into .tools/ (no root): the
# versions the rule and end-to-end tests run.
tools:
	@bash scripts/install-prometheus.sh

# Pictures of the dashboards' panels in docs/dashboards/, their queries run through a real
# Prometheus over the demo's collapse and recovery (a few minutes; needs `make tools`).
dashboard-pictures: $(STAMP)
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/python -m exporter.demo.pictures docs/dashboards

# Each Kubernetes overlay built by kubectl and checked against the Kubernetes API schemas,
# offline (the Prometheus Operator kinds are checked by tests/test_deploy_kubernetes.py).
validate-deploy: $(STAMP)
	@for overlay in deploy/kubernetes/overlays/*/; do \
		echo "$$overlay"; \
		kubectl kustomize "$$overlay" | $(BIN)/kubernetes-validate --strict --quiet --no-warn - || exit 1; \
	done

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_mixin_lint.py

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Both run on every usable CPU (pytest-xdist), a test file to a worker, so a module's shared
# fixture (a demo run, a built overlay) is made once, longest files first in the order
# tests/conftest.py gives them (tests/durations.json). CI=true picks the thorough hypothesis
# profile (tests/conftest.py).
PYTEST := $(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

test: system-deps tools $(STAMP) lint
	$(PYTEST)

# The fast loop: tests that start no process (no daemon, Prometheus, promtool or docker), and
# of a long sweep its representative cases (tests/support/sweep.py).
unit: $(STAMP)
	$(PYTEST) -m "not e2e and not sweep"

# Records each test file's wall time in tests/durations.json, which orders the runs above:
# after adding or much changing a long test file (a whole run, minutes).
durations: system-deps tools $(STAMP)
	$(PYTEST) -p no:cacheprovider --junitxml=.durations.xml
	$(BIN)/python -m tests.support.durations .durations.xml > tests/durations.json
	rm -f .durations.xml

demo: $(STAMP)
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/python -m exporter.demo

# Alerts, recording rules, dashboards and the PrometheusRule for your own selector, labels,
# thresholds and runbook: `make mixin CONFIG=my-mixin.yaml OUT=DIR`. Without CONFIG and OUT it
# regenerates the default rendering the repository keeps (a test fails when they differ).
CONFIG ?=
OUT ?=
mixin: $(STAMP)
	$(BIN)/python -m exporter.mixin $(if $(CONFIG),--config $(CONFIG)) $(if $(OUT),--out $(OUT))

# End-to-end speed beside mtail on a generated busy multi-rank log (minutes; not part of test).
bench: $(STAMP)
	@bash scripts/install-system-deps.sh bench
	cd bench && ../$(BIN)/python e2e_bench.py && nice ../$(BIN)/python live_bench.py

clean:
	rm -rf $(VENV) .tools build dist *.egg-info .pytest_cache .ruff_cache .hypothesis
