# Barge — run `make help` for the list of targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
BARGE := $(VENV)/bin/barge
CLUSTER_DIR := .barge/cluster
# `make test` runs the suite in this many pytest-xdist workers, each with its own control plane; a module is one unit
# of work and tests/node one (one node per machine). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
# Debian packages the tests need: PostgreSQL (ledger), redis and RabbitMQ (queue workers), Prometheus (promtool and
# the server, monitoring tests), openssl (control-plane keys), git, nodejs (Azurite, the Azure Blob Storage emulator,
# pinned in tools/azurite/package-lock.json; Debian's `npm` is added only when no npm is on PATH, as a nodejs from
# elsewhere bundles its own); for the image and the local node (tools/image.py, localcluster.py up --node):
# mmdebstrap and podman (the image without Docker), containerd, runc and the CNI loopback plugin. Add a package here; nothing else to
# change.
DEBIAN_PACKAGES := openssl git postgresql redis-server rabbitmq-server prometheus nodejs \
  mmdebstrap podman uidmap fuse-overlayfs containerd runc containernetworking-plugins
AZURITE := tools/azurite/node_modules/.stamp
export PYTHONDONTWRITEBYTECODE := 1

.DEFAULT_GOAL := help

##@ General
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development
deps: debian-packages $(AZURITE) ## Install the Debian packages the tests need (DEBIAN_PACKAGES) and Azurite

debian-packages: ## The Debian packages (DEBIAN_PACKAGES) that are missing: apt-get as root, else sudo
	@missing=$$(for pkg in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null | grep -q 'install ok installed' || echo "$$pkg"; done; \
	  command -v npm >/dev/null || echo npm); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "installing Debian packages:" $$missing; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; else \
	  echo "not root and no sudo: run as root: apt-get install" $$missing >&2; exit 1; fi; \
	$$sudo apt-get update -qq && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing

$(AZURITE): tools/azurite/package-lock.json tools/azurite/package.json | debian-packages
	npm ci --prefix tools/azurite --no-audit --no-fund --loglevel=error
	touch $@

venv: $(VENV)/.stamp ## Create .venv from the lock file (requirements.lock)
$(VENV)/.stamp: requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==0.13.9
	$(VENV)/bin/uv pip sync --quiet --python $(PY) --require-hashes --compile-bytecode requirements.lock
	$(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -e .
	touch $@

lock: ## Re-resolve requirements.lock from pyproject.toml
	$(VENV)/bin/uv pip compile pyproject.toml --group dev --generate-hashes --python-version 3.11 \
	  --no-header -o requirements.lock

GENERATE := $(BARGE) crds --out crds --chart charts/barge --docs docs/reference

crds: venv ## Regenerate crds/, the chart's CRDs and RBAC rules, and the site's reference pages (docs/reference/)
	$(GENERATE)

manifests: venv ## Render manifests/install/ from the chart (default values) with helm
	$(PYTHON) tools/manifests.py

lint: venv ## ruff, mypy --strict, import-linter contracts, generated files (CRDs, chart, manifests, Argo CD patch) up to date, actionlint, the docs site (mkdocs --strict)
	$(VENV)/bin/ruff check operator tests tools bench integrations
	$(VENV)/bin/ruff format --check operator tests tools bench integrations
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict integrations/argocd/generate.py
	$(VENV)/bin/lint-imports --no-cache
	$(GENERATE) --check
	$(PYTHON) tools/manifests.py --check
	$(PY) integrations/argocd/generate.py --check
	$$($(PYTHON) tools/localcluster.py tool-path actionlint) .github/workflows/*.yml
	site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir "$$site"; \
	  rc=$$?; rm -rf "$$site"; exit $$rc

fmt: venv ## Format the code with ruff
	$(VENV)/bin/ruff format operator tests tools bench integrations
	$(VENV)/bin/ruff check --fix operator tests tools bench integrations

image: debian-packages ## Build Barge's OCI image with podman, no Docker, no registry (tools/image.py; cached)
	$(PYTHON) tools/image.py build

##@ Tests
test: deps lint ## Lint, type-check and run every test (unit, contract, integration, e2e, node), TEST_WORKERS in parallel
	@$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi; exit $$rc

test-unit: venv ## Unit tests only (no cluster, no network)
	$(PY) -m pytest -q tests/unit

##@ Local control plane (etcd + kube-apiserver built from Go modules)
tools: ## Build (or reuse from ~/.cache/barge/bin) etcd, kube-apiserver, kubectl, kube-controller-manager, kubelet, kube-scheduler, helm, argocd, KEDA
	$(PYTHON) tools/localcluster.py build

cluster-up: ## Start the local control plane (CONTROLLERS=1: with kube-controller-manager; NODE=1: and a real node); writes .barge/kubeconfig
	$(PYTHON) tools/localcluster.py up --dir $(CLUSTER_DIR) $(if $(CONTROLLERS),--controllers) $(if $(NODE),--node)
	@mkdir -p .barge && cp $(CLUSTER_DIR)/kubeconfig .barge/kubeconfig
	@echo "export KUBECONFIG=$(CURDIR)/.barge/kubeconfig PATH=$$(dirname $$($(PYTHON) tools/localcluster.py kubectl-path)):\$$PATH"

cluster-down: ## Stop the local control plane
	$(PYTHON) tools/localcluster.py down --dir $(CLUSTER_DIR)
	@rm -f .barge/kubeconfig

##@ Demo and benchmarks
demo: deps venv ## Local control plane + emulator + operator on free ports; the claims-nightly sample watched to completion (builds only etcd and the Kubernetes control plane from Go, says so and how long a cold build takes)
	bash tools/demo.sh

bench: deps venv ## Benchmarks (bench/), printed as tables (deps: bench_workers needs redis-server, bench_ingest PostgreSQL)
	@ls bench/*.py >/dev/null 2>&1 && for b in bench/bench_*.py; do $(PY) $$b || exit 1; done || \
	  echo "no benchmarks yet"

.PHONY: help deps debian-packages image venv lock crds manifests lint fmt test test-unit tools cluster-up cluster-down demo bench
