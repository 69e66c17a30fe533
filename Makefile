# escaler — every target creates what it needs (virtualenv, control-plane binaries) on first use.
SHELL := /bin/bash
PY_VERSION ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
# where `make e2e` and `make demo` run: local (default: the control plane from hack/) or kind (needs Docker)
E2E_CLUSTER ?= local
E2E_CLUSTERS := local kind

.PHONY: test unit e2e e2e-local e2e-kind lint bench crds dist demo demo-local demo-kind build-cluster clean \
	venv chromium

ifneq ($(filter e2e demo,$(MAKECMDGOALS)),)
ifneq ($(words $(E2E_CLUSTER))$(filter-out $(E2E_CLUSTERS),$(E2E_CLUSTER)),1)
$(error E2E_CLUSTER='$(E2E_CLUSTER)' is not allowed: use one of $(E2E_CLUSTERS) (default local, the \
control plane from hack/; kind needs Docker))
endif
endif

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PY_VERSION) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev,all]'
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

venv: $(STAMP)

## make chromium: Debian's chromium + chromedriver for the SLO API form's headless-browser test
chromium:
	@(command -v chromium && command -v chromedriver) >/dev/null || (apt-get update && apt-get install -y chromium chromium-driver)

# the test tiers (docs/testing.md): their JUnit reports go here, and the 20 slowest tests are
# printed from them at the end of `make test`
RESULTS := .test-results
# parallel e2e workers sharing one control plane: from the cores and the tier's measured CPU share
# (hack/e2e_workers.py; override with E2E_WORKERS=N)
E2E_WORKERS ?= $(shell $(PY_VERSION) hack/e2e_workers.py)
UNIT_ARGS ?= -q -n 2 --dist loadfile
E2E_PARALLEL = $(PY) -m pytest tests/e2e -q -n $(E2E_WORKERS) --dist load -m "not serial"
E2E_SERIAL = $(PY) -m pytest tests/e2e -q -m serial

# the e2e tiers side by side: the serial tier (its own control plane, one test at a time, mostly
# waiting on API server kills, leases and polls) runs beside the parallel tier (the shared one);
# its console output goes to a file, printed when both are done (docs/testing.md)
E2E_BOTH = status=0; \
	$(E2E_SERIAL) $(1) > $(RESULTS)/e2e-serial.log 2>&1 & serial=$$!; \
	$(E2E_PARALLEL) $(2) || status=1; \
	wait $$serial || status=1; \
	echo "=== the serial tier (ran beside the parallel tier; output from $(RESULTS)/e2e-serial.log)"; \
	cat $(RESULTS)/e2e-serial.log

## make test: lint, the unit tests, then the e2e suite's parallel tier (one shared local control
## plane built by hack/) with its serial tier beside it (a control plane of its own); every tier
## runs, and the 20 slowest tests are printed at the end
test: $(STAMP) chromium
	$(MAKE) lint
	hack/build.sh
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	@unit=0; $(PY) -m pytest tests/unit $(UNIT_ARGS) --junitxml=$(RESULTS)/unit.xml || unit=1; \
	$(call E2E_BOTH,--junitxml=$(RESULTS)/e2e-serial.xml,--junitxml=$(RESULTS)/e2e-parallel.xml); \
	$(PY) hack/slowest.py $(RESULTS)/unit.xml $(RESULTS)/e2e-parallel.xml $(RESULTS)/e2e-serial.xml; \
	exit $$((status | unit))

# the packaging unit tests run the cached kubectl (kustomize) and helm
unit: $(STAMP)
	hack/build.sh k8s helm
	$(PY) -m pytest tests/unit -q

## make e2e [E2E_CLUSTER=local|kind]: the e2e suite on the local control plane (default) or on kind
e2e: e2e-$(E2E_CLUSTER)

e2e-local: $(STAMP) chromium
	hack/build.sh
	@mkdir -p $(RESULTS)
	@$(call E2E_BOTH,,); exit $$status

# the Docker check comes first, before the venv, chromium or any binary is built (hack/kind.py)
e2e-kind:
	@$(PY_VERSION) hack/kind.py preflight --target e2e
	@$(MAKE) --no-print-directory venv chromium
	hack/build.sh k8s helm
	$(PY) hack/kind.py e2e

lint: $(STAMP)
	$(VENV)/bin/ruff check escaler tests bench examples hack
	$(VENV)/bin/mypy escaler
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) bench/run.py

## make chaos: the chaos tests (pytest marker `chaos`, issue 15) in their full form on the local control
## plane; prints their table (runs, passed, worst takeover, writes, peak RSS) into docs/reliability.md
.PHONY: chaos
chaos: $(STAMP)
	hack/build.sh
	$(PY) bench/chaos.py

## make crds: regenerate manifests/crds, refresh the package's copies (escaler/data/: crds and samples,
## the wheel's package data) and the chart's copies when the chart exists
crds: $(STAMP)
	$(PY) -m escaler crds --out manifests/crds
	$(PY) -m escaler crds --out escaler/data/crds >/dev/null
	@if [ -d charts/escaler/crds ]; then $(PY) -m escaler crds --out charts/escaler/crds >/dev/null; fi
	@mkdir -p escaler/data/samples && rm -f escaler/data/samples/*.yaml && cp manifests/samples/*.yaml escaler/data/samples/

## make dist: the sdist and the wheel (built from the sdist) into dist/
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .

build-cluster:
	hack/build.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(RESULTS)

## make demo: the local control plane and the toolkit's example operator, narrated
demo: demo-$(E2E_CLUSTER)

demo-local: $(STAMP)
	hack/build.sh k8s etcd kwok
	$(PY) hack/demo.py

demo-kind:
	@$(PY_VERSION) hack/kind.py preflight --target demo
	@$(MAKE) --no-print-directory venv
	hack/build.sh k8s helm
	$(PY) hack/kind.py demo
