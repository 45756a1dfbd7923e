# hostnet-rdma — the two commands: `make run` (the webhook, locally) and `make test` (every tier).
# Both do their own set-up on a fresh machine: a virtualenv in .venv with the project and its
# test deps, and (for the API-server tier) kube-apiserver/etcd/helm built once into a cache
# outside the repo (~/.cache/hostnet-rdma).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test check setup lint fmt golden bench soak clean e2e kind-e2e

setup: $(STAMP)

# --system-site-packages: reuse a machine-wide torch if there is one (it is large).
# An editable install is plain Python (edits take effect; setup.py compiles wheels only);
# HOSTNET_RDMA_PURE=1 says so for older checkouts. The image compiles the core with mypyc, and
# `make test` checks the compiled build too (scripts/testenv/build-compiled.sh).
$(STAMP): pyproject.toml setup.py
	@# torch from PyPI (when the machine has none) unpacks to ~7 GB: say so before pip fails on it.
	@df -Pk . | awk 'NR==2 && $$4 < 10*1024*1024 { printf "[setup] warning: %.1f GiB free here; a fresh install of torch needs ~7 GiB, a cold make test ~35 GiB\n", $$4/1048576 }' >&2
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	HOSTNET_RDMA_PURE=1 $(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,rendezvous]'
	touch $@

run: setup
	$(VENV)/bin/hostnet-rdma serve --dev

test: setup
	VENV=$(VENV) scripts/test.sh

lint: setup
	VENV=$(VENV) scripts/lint.sh

# The inner loop: lint and the tests that need no root, build, server or cluster (~2 min).
check: setup
	VENV=$(VENV) scripts/check.sh

fmt: setup
	$(PY) -m ruff format app tests scripts
	$(PY) -m ruff check --fix app tests scripts

golden: setup
	REFRESH_GOLDEN=1 $(PY) -m pytest -q tests/test_golden.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Benchmarks (BENCHMARKS.md): ~17 minutes, writes scripts/bench/results.json.
bench: setup
	$(PY) scripts/bench/run.py --out scripts/bench/results.json

# Memory under sustained load (BENCHMARKS.md): 30 minutes at saturation on connections that come
# and go; writes scripts/bench/soak-results.json, exits 1 if the RSS is not flat.
soak: setup
	$(PY) scripts/bench/soak.py --out scripts/bench/soak-results.json

# The end-to-end check of a cluster with the chart installed (docs/checking.md, "Test your cluster"):
#   make e2e E2E_ARGS="--context prod --gpus-per-node 8 --node-selector node.kubernetes.io/instance-type=BM.GPU4.8"
e2e: setup
	$(VENV)/bin/hostnet-rdma e2e $(E2E_ARGS)

# scripts/kind-e2e.sh on real kind on this project's test machine (Docker from Debian, kind's
# images built locally: scripts/testenv/kind/). Not part of `make test`: ~25 min cold, ~8 warm.
# Users with Docker run scripts/kind-e2e.sh itself.
kind-e2e: setup
	scripts/testenv/kind/run.sh
