# Every target installs the pinned environment first when it is missing or stale
# (.venv/.stamp is newer than every pin file), so a fresh clone needs nothing else.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
CDK := node_modules/.bin/cdk
PROFILE ?= small
RUN ?=

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := 1
export AWS_EC2_METADATA_DISABLED := true
export RAY_AUTH_MODE := disabled
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-fast synth lint bench rehearse deploy destroy lock clean help

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt constraints.txt pyproject.toml package.json package-lock.json
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 (the CPU torch wheel is cp311) or set PYTHON=" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "install: pinned Python environment into $(VENV) (first time: ~2 min)"
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt -c constraints.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@echo "install: aws-cdk CLI (npm ci)"
	npm ci --silent --no-audit --no-fund
	@touch $@

install: $(STAMP) ## create .venv and node_modules from the pins

test: $(STAMP) ## the whole test suite (what CI runs)
	$(PY) -m pytest

test-fast: $(STAMP) ## the suite without tests marked slow
	$(PY) -m pytest -m "not slow"

synth: $(STAMP) ## offline `cdk synth` of every stack into cdk.out/ (no credentials, network or Docker)
	$(CDK) synth -q -c profile=$(PROFILE)
	@ls cdk.out/*.template.json

lint: $(STAMP) ## ruff, cfn-lint, hadolint, shellcheck
	$(PY) -m ruff check .
	$(CDK) synth -q -c profile=$(PROFILE)
	$(VENV)/bin/cfn-lint -r us-west-2 --non-zero-exit-code error cdk.out/*.template.json
	find containers -name Dockerfile -print0 | xargs -0 -r $(VENV)/bin/hadolint
	$(VENV)/bin/shellcheck .ci/run $$(find infra containers -name '*.sh')

bench: $(STAMP) ## benchmarks: figures as ratios against a baseline measured in the same run
	$(PY) -m pip install -q -r benchmarks/requirements.txt
	$(PY) -m benchmarks

rehearse: $(STAMP) ## the whole training loop on CPU with a tiny model (8-9 min on 2 cores)
	$(VENV)/bin/skymaze rehearse $(RUN)

deploy: $(STAMP) ## cdk deploy --all for PROFILE (needs AWS credentials and Docker)
	$(VENV)/bin/skymaze deploy --profile $(PROFILE)

destroy: $(STAMP) ## tear down Kubernetes objects that own AWS resources, then cdk destroy --all
	$(VENV)/bin/skymaze teardown --profile $(PROFILE)

lock: ## regenerate constraints.txt from the current venv
	{ echo "# Full transitive lock (pip freeze of a working venv), applied with -c by the Makefile."; \
	  echo "# Regenerate with: make lock"; \
	  $(PY) -m pip freeze --exclude-editable | sed 's/^torch==.*/torch==2.13.0/'; } > constraints.txt

clean: ## remove build outputs (keeps .venv and runs/)
	rm -rf cdk.out .pytest_cache .ruff_cache
