# escaler — every target creates what it needs (virtualenv, control-plane binaries) on first use.
SHELL := /bin/bash
PY_VERSION ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: test unit e2e lint bench crds demo build-cluster clean venv chromium

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PY_VERSION) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

venv: $(STAMP)

## make chromium: Debian's chromium + chromedriver for the SLO API form's headless-browser test
chromium:
	@(command -v chromium && command -v chromedriver) >/dev/null || (apt-get update && apt-get install -y chromium chromium-driver)

## make test: lint, unit tests, then the e2e suite on a local control plane built by hack/
test: $(STAMP) chromium
	$(MAKE) lint
	$(PY) -m pytest tests/unit -q
	hack/build.sh
	$(PY) -m pytest tests/e2e -q

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

e2e: $(STAMP) chromium
	hack/build.sh
	$(PY) -m pytest tests/e2e -q

lint: $(STAMP)
	$(VENV)/bin/ruff check escaler tests bench examples hack
	$(VENV)/bin/mypy escaler
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) bench/run.py

crds: $(STAMP)
	$(PY) -m escaler crds --out manifests/crds

build-cluster:
	hack/build.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

## make demo: the local control plane and the toolkit's example operator, narrated
demo: $(STAMP)
	hack/build.sh k8s etcd kwok
	$(PY) hack/demo.py
