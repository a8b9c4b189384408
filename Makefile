# Hangar: a thin wrapper over CMake and the Node test/bench tooling.
#
#   make setup      install what is missing (apt packages, npm packages for tests/e2e, the
#                   Playwright executor and the BiDi mapper); fast when done
#   make build      configure + build (incremental) into build/
#   make run        setup + build + run `build/bin/hangar serve`
#   make test       setup + build + the fast tier (≤ 10 min): CppUnit, the SDK example, the e2e files
#                   but E2E_SLOW_FILES with the tests marked `slow` skipped, the Python SDK, schemathesis
#   make test-all   the same with every e2e file and test (what CI runs)
#   make test-asan  the CppUnit suites under ASan+UBSan, in build-asan/
#   make test-postgres  the e2e suite with every server on a throw-away PostgreSQL (E2E_TESTS narrows)
#   make test-python  the Python SDK (PyPI kernel) conformance suite, tests/python (part of `make test`)
#   make test-api   schemathesis against GET /openapi.json, CI-sized (part of `make test`)
#   make test-fuzz  schemathesis at full size (≥ 10,000 requests) and each libFuzzer target 10 min
#   make test-fuzz-smoke  each libFuzzer target for 30 s (CI)
#   make bench      setup + build + benchmarks (bench/run.mjs)
#   make package    setup + build + the .deb and .rpm (CPack) in build/packages/
#   make package-test  the packages built, inspected, installed into a staging root and used
#   make format     clang-format the C and C++ sources
#   make lint       clang-format check + clang-tidy (.clang-tidy), units checked before from a cache; CI runs it
#   make lint-all   the same with every unit checked again
#   make clean      remove build/ and build-asan/

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

BUILD_DIR    ?= build
ASAN_DIR     ?= build-asan
BUILD_TYPE   ?= RelWithDebInfo
JOBS         ?= 2
E2E_DIR      := tests/e2e
PW_EXEC_DIR  := plugins/playwright/executor
BENCH_PEERS_DIR := bench/peers
BIDI_DIR     := plugins/bidi/mapper
EXTRACTOR_DIR := plugins/browsers/extractor
APPS_RUNNER_DIR := plugins/apps/runner
E2E_TESTS    ?= $(sort $(wildcard $(E2E_DIR)/*.test.mjs))
# Left out of `make test` (tests/e2e/README.md, "Tiers"): load and timeout suites, repeated cold
# starts, the headful live view (the headless one stays), the build attacks and every field's
# echo. `make test-all` and CI run them; lib/tier.mjs marks the slow tests inside the others.
E2E_SLOW_FILES := dashboard spares load timeout contract_fields tenant_attacks_build liveview apps
E2E_FAST_TESTS := $(filter-out $(patsubst %,$(E2E_DIR)/%.test.mjs,$(E2E_SLOW_FILES)),$(E2E_TESTS))
E2E_TIER     ?= all
E2E_TIMEOUT  ?= 600000
STAMP_DIR    := $(BUILD_DIR)/.stamps
# ccache keys paths relative to the checkout and ignores the build folder's name, so clones and
# worktrees in other folders, and the ASan tree's identical compiles, share one cache.
export CCACHE_BASEDIR   := $(CURDIR)
export CCACHE_NOHASHDIR := 1

APT_PACKAGES := build-essential cmake ccache libpoco-dev nlohmann-json3-dev libcppunit-dev chromium xvfb pulseaudio \
                bubblewrap libxcb1-dev libxcb-xtest0-dev libxcb-shm0-dev libxcb-xfixes0-dev libxcb-damage0-dev libyuv-dev libx11-dev libpng-dev ffmpeg x11vnc novnc \
                clang-format clang-tidy libarchive-dev zip unzip python3 python3-venv python3-yaml \
                passt libseccomp-dev iproute2 \
                libsodium-dev liboath-dev oathtool openssl libssl-dev libpsl-dev \
                tinyproxy dante-server stunnel4 libnss3-tools postgresql libpq-dev haproxy \
                node-tweetnacl libprotobuf-dev protobuf-compiler libutf8proc-dev
# Only for the libFuzzer targets (make test-fuzz, test-fuzz-smoke): clang and its fuzzer runtime.
FUZZ_APT_PACKAGES := clang libclang-rt-14-dev
FUZZ_DIR     ?= build-fuzz
FUZZ_TARGETS := multipart zip json_body fs_path cdp_token
FUZZ_SECONDS ?= 600
API_VENV     := tests/api/.venv
PY_VENV      := tests/python/.venv
API_EXAMPLES ?= 8

FORMAT_DIRS  := host plugins sdk tests/unit tests/sdk tests/fuzz

.PHONY: otelcol searx helm-check setup setup-apt setup-tun setup-npm setup-venv setup-pyvenv setup-fuzz test-api test-python test-fuzz test-fuzz-smoke fuzz-build setup-package package package-test build run test test-all test-unit test-e2e test-postgres test-sdk-example test-asan bench setup-bench-peers format lint lint-all clean

# ---- setup ------------------------------------------------------------------------------------
setup: setup-apt setup-tun setup-npm setup-venv setup-pyvenv

# apt: only when a package is missing (dpkg-query first; `apt-get update` only then). Node 20 comes
# with the machine; Debian's nodejs is only a fallback when there is no `node` at all. The stamp
# depends on this Makefile so changing APT_PACKAGES re-checks.
setup-apt: $(STAMP_DIR)/apt

$(STAMP_DIR)/apt: Makefile
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@# Chromium reads managed policies here; each instance binds its own chrome_policy over it.
	@# Instances run as the unprivileged `hangar` user when the server runs as root.
	@SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	[ -d /etc/chromium/policies/managed ] || $$SUDO mkdir -p /etc/chromium/policies/managed; \
	id -u hangar >/dev/null 2>&1 || $$SUDO useradd --system --no-create-home --shell /usr/sbin/nologin hangar
	@mkdir -p $(STAMP_DIR) && touch $@

# Each instance's network namespace is linked out by pasta, running as the sandbox user, through
# /dev/net/tun: Debian's udev makes it 0666; some containers create it 0600 or not at all. Checked
# on every set-up (a reboot of such a container resets it), cheap.
setup-tun:
	@SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	if [ ! -c /dev/net/tun ]; then $$SUDO mkdir -p /dev/net && $$SUDO mknod -m 0666 /dev/net/tun c 10 200 || true; fi; \
	if [ -c /dev/net/tun ] && [ "$$(stat -c %a /dev/net/tun)" != 666 ]; then $$SUDO chmod 0666 /dev/net/tun || true; fi

# npm: `npm ci` when node_modules is missing or older than package-lock.json. Puppeteer-core and
# playwright-core never download a browser; the tests use Debian's /usr/bin/chromium.
setup-npm: $(E2E_DIR)/node_modules/.package-lock.json $(PW_EXEC_DIR)/node_modules/.package-lock.json \
           $(BIDI_DIR)/node_modules/.package-lock.json \
           $(APPS_RUNNER_DIR)/node_modules/.package-lock.json \
           $(EXTRACTOR_DIR)/node_modules/.package-lock.json

$(E2E_DIR)/node_modules/.package-lock.json: $(E2E_DIR)/package-lock.json $(E2E_DIR)/package.json | setup-apt
	cd $(E2E_DIR) && PUPPETEER_SKIP_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The playwright plugin's Node executor: playwright-core (CDP client) and esbuild (TypeScript).
$(PW_EXEC_DIR)/node_modules/.package-lock.json: $(PW_EXEC_DIR)/package-lock.json $(PW_EXEC_DIR)/package.json | setup-apt
	cd $(PW_EXEC_DIR) && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The bidi plugin's Node mapper: chromium-bidi (WebDriver BiDi over CDP) and ws.
$(BIDI_DIR)/node_modules/.package-lock.json: $(BIDI_DIR)/package-lock.json $(BIDI_DIR)/package.json | setup-apt
	cd $(BIDI_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The browsers plugin's page extractor: Mozilla Readability, compiled into the plugin (re-run
# cmake after installing it).
$(EXTRACTOR_DIR)/node_modules/.package-lock.json: $(EXTRACTOR_DIR)/package-lock.json $(EXTRACTOR_DIR)/package.json | setup-apt
	cd $(EXTRACTOR_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The apps plugin's runner: tsx (runs a deployed app's TypeScript entrypoint).
$(APPS_RUNNER_DIR)/node_modules/.package-lock.json: $(APPS_RUNNER_DIR)/package-lock.json $(APPS_RUNNER_DIR)/package.json | setup-apt
	cd $(APPS_RUNNER_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Python tools of the tests (schemathesis), pinned in tests/api/requirements.txt, in their own venv
# made with Debian's python3.
setup-venv: $(API_VENV)/.stamp

$(API_VENV)/.stamp: tests/api/requirements.txt | setup-apt
	[ -x $(API_VENV)/bin/python ] || /usr/bin/python3 -m venv $(API_VENV)
	$(API_VENV)/bin/pip install -q --disable-pip-version-check -r tests/api/requirements.txt
	@touch $@

# The official Python SDK (PyPI kernel) and pytest, pinned in tests/python/requirements.txt.
setup-pyvenv: $(PY_VENV)/.stamp

$(PY_VENV)/.stamp: tests/python/requirements.txt | setup-apt
	[ -x $(PY_VENV)/bin/python ] || /usr/bin/python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
	@touch $@

setup-fuzz: setup-apt
	@missing=""; for p in $(FUZZ_APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; fi

# ---- build ------------------------------------------------------------------------------------
$(BUILD_DIR)/CMakeCache.txt: | setup-apt
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j$(JOBS)

run: setup build
	exec $(BUILD_DIR)/bin/hangar serve

# ---- tests ------------------------------------------------------------------------------------
test: setup build
	@# -k: run every stage even when an earlier one fails, then fail.
	@$(MAKE) --no-print-directory -k test-unit test-sdk-example test-e2e test-python test-api \
	  E2E_TIER=fast E2E_TESTS="$(E2E_FAST_TESTS)"

test-all: setup build
	@$(MAKE) --no-print-directory -k test-unit test-sdk-example test-e2e test-python test-api

test-unit:
	cd $(BUILD_DIR) && ctest --output-on-failure -j1

# The SDK example and the wrong-ABI plugin, built out of tree from the SDK headers alone.
test-sdk-example:
	tests/sdk/build_example.sh $(abspath $(BUILD_DIR))/sdk-example

# TAP on stdout, and each file's wall time in $(BUILD_DIR)/test-times.txt (slowest first).
E2E_REPORTERS = --test-reporter=tap --test-reporter-destination=stdout \
  --test-reporter=./lib/times-reporter.mjs --test-reporter-destination=$(abspath $(BUILD_DIR))/$(1)

test-e2e: setup-npm
	cd $(E2E_DIR) && HANGAR_BIN=$(abspath $(BUILD_DIR))/bin/hangar \
	  HANGAR_SDK_EXAMPLE_DIR=$(abspath $(BUILD_DIR))/sdk-example HANGAR_E2E_TIER=$(E2E_TIER) \
	  node --test --test-concurrency=1 --test-timeout=$(E2E_TIMEOUT) $(call E2E_REPORTERS,test-times.txt) \
	  $(notdir $(E2E_TESTS))

# The same e2e suite with every server on a fresh database of one throw-away PostgreSQL (issue 24;
# tests/pg/with-pg.sh starts it once and removes it whatever the outcome). E2E_TESTS narrows it.
test-postgres: setup-npm
	cd $(E2E_DIR) && HANGAR_BIN=$(abspath $(BUILD_DIR))/bin/hangar \
	  HANGAR_SDK_EXAMPLE_DIR=$(abspath $(BUILD_DIR))/sdk-example HANGAR_E2E_TIER=$(E2E_TIER) \
	  ../pg/with-pg.sh node --test --test-concurrency=1 --test-timeout=$(E2E_TIMEOUT) \
	  $(call E2E_REPORTERS,test-times-postgres.txt) $(notdir $(E2E_TESTS))

# pytest's exit status is the stage's: a failure (1) or no test collected (5) fails `make test`.
# The fast tier (HANGAR_E2E_TIER=fast, as for the e2e files) skips the tests marked `slow`.
# The e2e packages too: test_0131_managed_auth.py serves the login sites of tests/fixtures/sites
# (Node, importing tests/e2e/lib).
# ---- real servers the tests run, built from the Go module proxy --------------------------------
# Built once per version into a cache outside the checkout, like helm below. The OpenTelemetry
# Collector is ours to assemble (tests/tools/otelcol: the OTLP receiver and the file exporter
# only, every module at one release, go.sum pinned): the export tests send to it and read its file.
TOOLS_CACHE  ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/hangar-tools
GO           ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
OTELCOL_VERSION := v0.165.0
OTELCOL_BIN  := $(TOOLS_CACHE)/otelcol-$(OTELCOL_VERSION)/hangar-otelcol

$(OTELCOL_BIN): tests/tools/otelcol/main.go tests/tools/otelcol/go.mod tests/tools/otelcol/go.sum
	cd tests/tools/otelcol && $(GO) build -trimpath -o $@ .

otelcol: $(OTELCOL_BIN)

# searx 0.17.0 (SearXNG's predecessor, same JSON API) for the search tests: see tests/tools/searx.
SEARX_DIR    := $(TOOLS_CACHE)/searx-0.17.0
SEARX_PYTHON := $(SEARX_DIR)/venv/bin/python
SEARX_STAMP  := $(SEARX_DIR)/venv/.hangar-installed
$(SEARX_STAMP): tests/tools/searx/requirements.txt tests/tools/searx/hangar_py311_compat.pth
	rm -rf $(SEARX_DIR)/venv && python3 -m venv $(SEARX_DIR)/venv
	$(SEARX_DIR)/venv/bin/pip install -q --no-deps searx==0.17.0
	$(SEARX_DIR)/venv/bin/pip install -q -r tests/tools/searx/requirements.txt
	cp tests/tools/searx/hangar_py311_compat.pth $$($(SEARX_PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/
	touch $@

searx: $(SEARX_STAMP)

test-python: setup-pyvenv $(E2E_DIR)/node_modules/.package-lock.json $(OTELCOL_BIN) $(SEARX_STAMP)
	cd tests/python && HANGAR_BIN=$(abspath $(BUILD_DIR))/bin/hangar HANGAR_E2E_TIER=$(E2E_TIER) \
	  HANGAR_OTELCOL=$(OTELCOL_BIN) HANGAR_SEARX=$(SEARX_PYTHON) \
	  timeout 600 .venv/bin/python -m pytest -q -p no:cacheprovider

test-asan: setup-apt
	@[ -f $(ASAN_DIR)/CMakeCache.txt ] || cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DHANGAR_SANITIZE=ON
	cmake --build $(ASAN_DIR) -j$(JOBS) --target hangar-unit-tests
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/unit/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j1

# schemathesis, CI-sized: ≥ 1,000 requests, 0 server errors, 0 response-schema violations.
test-api: setup-venv $(SEARX_STAMP)
	HANGAR_SEARX=$(SEARX_PYTHON) $(API_VENV)/bin/python tests/api/fuzz_api.py --bin $(abspath $(BUILD_DIR))/bin/hangar \
	  --out $(abspath $(BUILD_DIR))/api-fuzz --examples $(API_EXAMPLES) --phases examples,coverage,fuzzing,stateful \
	  --seed 1 --min-requests 1000

# The libFuzzer targets (tests/fuzz), built with clang in their own tree. Each runs on a copy of
# its corpus (tests/fuzz/corpus/<target>, kept in git) so a run's finds can be merged by hand.
fuzz-build: setup-fuzz
	@[ -f $(FUZZ_DIR)/CMakeCache.txt ] || cmake -S tests/fuzz -B $(FUZZ_DIR) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_DIR) -j$(JOBS)

define run_fuzzers
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t $(FUZZ_DIR)/crashes/$$t; cp -n tests/fuzz/corpus/$$t/* $(FUZZ_DIR)/corpus/$$t/ 2>/dev/null || true; \
	  echo "fuzz $$t: $(1) s"; \
	  $(FUZZ_DIR)/fuzz_$$t -max_total_time=$(1) -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/crashes/$$t/ $(FUZZ_DIR)/corpus/$$t 2>$(FUZZ_DIR)/$$t.log \
	    || { tail -40 $(FUZZ_DIR)/$$t.log; echo "fuzz $$t: FAILED (log: $(FUZZ_DIR)/$$t.log)"; exit 1; }; \
	  grep -E "stat::number_of_executed_units|cov:" $(FUZZ_DIR)/$$t.log | tail -2; \
	done
endef

test-fuzz-smoke: fuzz-build
	$(call run_fuzzers,30)

test-fuzz: build fuzz-build setup-venv $(SEARX_STAMP)
	$(call run_fuzzers,$(FUZZ_SECONDS))
	HANGAR_SEARX=$(SEARX_PYTHON) $(API_VENV)/bin/python tests/api/fuzz_api.py --bin $(abspath $(BUILD_DIR))/bin/hangar \
	  --out $(abspath $(BUILD_DIR))/api-fuzz --examples 150 --min-requests 10000

# ---- bench ------------------------------------------------------------------------------------
bench: setup setup-bench-peers build
	HANGAR_BIN=$(abspath $(BUILD_DIR))/bin/hangar node bench/run.mjs

# The open-source peers the benchmarks compare with on this machine (bench/burst.mjs: Browserless,
# run on Debian's Chromium; its Playwright and Puppeteer never download a browser). Only the
# benchmarks need them, so `make setup` leaves them out.
setup-bench-peers: $(BENCH_PEERS_DIR)/node_modules/.package-lock.json

$(BENCH_PEERS_DIR)/node_modules/.package-lock.json: $(BENCH_PEERS_DIR)/package-lock.json $(BENCH_PEERS_DIR)/package.json | setup-apt
	cd $(BENCH_PEERS_DIR) && PUPPETEER_SKIP_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# ---- packages ---------------------------------------------------------------------------------
# rpmbuild (Debian's rpm) only for packaging; plain builds and tests do not need it.
setup-package: setup-apt
	@command -v rpmbuild >/dev/null 2>&1 || { SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends rpm; }

package: setup setup-package build
	cd $(BUILD_DIR) && cpack -G "DEB;RPM"

package-test: setup setup-package build
	BUILD_DIR=$(abspath $(BUILD_DIR)) tests/package/run.sh

# ---- Helm chart (packaging/helm) ---------------------------------------------------------------
# Not part of `make setup`: it fetches what it needs itself. Helm is built once per version from
# the Go module proxy into a cache outside the checkout (a clean clone, CI's, built it again in
# 200 s); kubestrict (strict field check with k8s.io/api's types) is ours, built into build/tools;
# the schema validator (kubernetes-models) comes from packaging/helm's own lockfile.
HELM_DIR     := packaging/helm
TOOLS_DIR    := $(CURDIR)/build/tools
HELM_VERSION := v3.22.0
HELM_BIN     := $(TOOLS_CACHE)/helm-$(HELM_VERSION)/helm

$(HELM_BIN):
	GOBIN=$(dir $(HELM_BIN)) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(TOOLS_DIR)/kubestrict: $(HELM_DIR)/kubestrict/main.go $(HELM_DIR)/kubestrict/go.mod $(HELM_DIR)/kubestrict/go.sum
	cd $(HELM_DIR)/kubestrict && GOBIN=$(TOOLS_DIR) $(GO) install .

$(HELM_DIR)/node_modules/.package-lock.json: $(HELM_DIR)/package.json $(HELM_DIR)/package-lock.json
	cd $(HELM_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

helm-check: $(HELM_BIN) $(TOOLS_DIR)/kubestrict $(HELM_DIR)/node_modules/.package-lock.json
	node $(HELM_DIR)/check.mjs $(HELM_BIN) $(TOOLS_DIR)/kubestrict

# ---- housekeeping -----------------------------------------------------------------------------
# clang-format must have nothing to change; clang-tidy (.clang-tidy) must report nothing in our code.
lint: build
	@files=$$(find $(FORMAT_DIRS) -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) \
	  -not -path '*/node_modules/*' 2>/dev/null); \
	clang-format --dry-run --Werror $$files
	@# Units whose preprocessed source, flags and rules were checked before come from the cache
	@# (tests/lint/tidy_cached.py, ~/.cache/hangar-tidy); `make lint-all` checks every one again.
	@python3 tests/lint/tidy_cached.py --build $(BUILD_DIR) --jobs $(JOBS) $(TIDY_FLAGS) 'host/src/.*\.cpp$$' 'plugins/.*\.cpp$$' \
	  || { echo "clang-tidy: findings above"; exit 1; }
	@echo "lint: clean"

lint-all:
	@$(MAKE) --no-print-directory lint TIDY_FLAGS=--all

format:
	@files=$$(find $(FORMAT_DIRS) -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) \
	  -not -path '*/node_modules/*' 2>/dev/null); \
	[ -z "$$files" ] || clang-format -i $$files

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)
