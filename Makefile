# Every target installs the pinned environment first when it is missing or stale
# (.venv/.stamp is newer than every pin file), so a fresh clone needs nothing else.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
CDK := node_modules/.bin/cdk
# Cluster size of deploy, destroy, synth and lint (PROFILE= is its old name). Unset, deploy and destroy
# use the size `skymaze deploy` or `skymaze use` recorded, else small; synth and lint use small.
SIZE ?= $(PROFILE)
DEFAULT_SIZE := small
RUN ?=
# torch: PyPI's Linux wheel of torch 2.13.0 is the CUDA build (several GB of CUDA libraries), and the
# rehearsal and the tests run on the CPU; so on Linux torch comes from PyTorch's CPU index (the +cpu
# build). macOS wheels on PyPI are CPU builds already. TORCH_INDEX= (empty) leaves it to pip's own
# configuration, e.g. a mirror or a wheel folder that already holds the CPU build. Only torch itself comes
# from that index (its dependencies from requirements.txt and constraints.txt), tried once more at most:
# where the index is unreachable, pip falls through to its own configuration within seconds.
UNAME_S ?= $(shell uname -s)
TORCH_VERSION := 2.13.0
ifeq ($(UNAME_S),Linux)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_SPEC := torch==$(TORCH_VERSION)+cpu
else
TORCH_INDEX ?=
TORCH_SPEC := torch==$(TORCH_VERSION)
endif

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := 1
export AWS_EC2_METADATA_DISABLED := true
# Ray started by make targets: token auth on, every port on 127.0.0.1 (see workload/localhost.py).
export RAY_AUTH_MODE := token
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false

.PHONY: install prometheus test test-fast contract synth lint bench rehearse study deploy destroy lock lock-images pin-bases images gpu-check clean help

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-vllm.txt constraints.txt pyproject.toml package.json package-lock.json
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 (the CPU torch wheel is cp311) or set PYTHON=" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "install: pinned Python environment into $(VENV) (first time: ~2 min)"
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(if $(TORCH_INDEX),--no-deps --retries 1 --timeout 15 --index-url $(TORCH_INDEX) )$(TORCH_SPEC)
	$(PY) -m pip install -q -r requirements.txt -c constraints.txt
	$(PY) -m pip install -q --no-deps -r requirements-vllm.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@echo "install: aws-cdk CLI (npm ci)"
	npm ci --silent --no-audit --no-fund
	@touch $@

install: $(STAMP) ## create .venv and node_modules from the pins

# checkov (templates, Kubernetes manifests, Dockerfiles) in its own venv: its pins clash with the app's.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.stamp

$(CHECKOV_STAMP): tests/infra/checkov-requirements.txt
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	@echo "install: checkov into $(CHECKOV_VENV)"
	$(CHECKOV_VENV)/bin/python -m pip install -q --no-deps -r tests/infra/checkov-requirements.txt
	@touch $@

# Debian's prometheus for the dashboards test (tests/infra/dashboards): its package unpacked into
# .prometheus/, as checkov has its own venv: nothing installed system-wide, no service started, no root.
# apt checks the package against Debian's signed index. Without apt-get the test skips, saying so.
PROMETHEUS_DIR := .prometheus
PROMETHEUS := $(PROMETHEUS_DIR)/root/usr/bin/prometheus

$(PROMETHEUS):
	@command -v apt-get >/dev/null || { echo "prometheus: no apt-get here: the dashboards test skips (or put a prometheus on PATH)"; exit 0; }
	@mkdir -p $(PROMETHEUS_DIR)
	@echo "install: Debian's prometheus into $(PROMETHEUS_DIR)"
	cd $(PROMETHEUS_DIR) && rm -f prometheus_*.deb && apt-get download -q prometheus
	dpkg-deb -x $(PROMETHEUS_DIR)/prometheus_*.deb $(PROMETHEUS_DIR)/root
	@rm -f $(PROMETHEUS_DIR)/prometheus_*.deb

prometheus: $(PROMETHEUS) ## Debian's prometheus unpacked into .prometheus/ (the dashboards test)

# Both test targets run on TEST_WORKERS pytest-xdist processes (TEST_WORKERS=0: one process, as plain
# `pytest` does). --dist loadfile keeps each test file on one worker, so a module's fixtures (the README
# walk, the hints' server) are built once; a session fixture is built once per worker that needs it.
# On the 2-core machine: make test 669 -> 464 s, make test-fast 84 -> ~55 s (docs/development.md).
TEST_WORKERS ?= 2
PYTEST_WORKERS := -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP) $(CHECKOV_STAMP) $(PROMETHEUS) ## the whole test suite (what CI runs), on TEST_WORKERS processes (2)
	$(PY) -m pytest $(PYTEST_WORKERS)

test-fast: $(STAMP) ## the suite without tests marked slow, on TEST_WORKERS processes (2)
	$(PY) -m pytest -m "not slow" $(PYTEST_WORKERS)

# The contract suite: the SkyRL plugin against the real SkyRL 0.4.0 in its own Python 3.12 venv
# (the image's torch 2.13.0, run on the CPU; no vLLM but in vllm-site/, which only the engine-argument
# contract puts on its path). First build ~3 min and 6.1 GB on 2 cores.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12) python3.12)
CONTRACT_VENV := .venv-contract
CONTRACT_PY := $(CONTRACT_VENV)/bin/python
CONTRACT_STAMP := $(CONTRACT_VENV)/.stamp
# vLLM and what it imports, beside the environment (tests/contract/vllm-requirements.txt)
CONTRACT_VLLM_SITE := $(CONTRACT_VENV)/vllm-site
TRAINER_LOCK := containers/trainer/requirements.lock
# uv installs the environment (parallel downloads: 3 min against pip's 13 min from cold caches) and
# resolves the trainer lock; the same pin is in tests/contract/requirements.txt. --compile-bytecode:
# uv writes no .pyc by default, and with PYTHONDONTWRITEBYTECODE set every process would compile
# Ray, torch and SkyRL from source at each import (Ray's dashboard agent then misses the raylet's
# fixed 15 s start-up window on a busy machine).
UV_VERSION := 0.13.9
CONTRACT_UV := $(CONTRACT_VENV)/bin/uv

$(CONTRACT_STAMP): tests/contract/requirements.txt tests/contract/vllm-requirements.txt $(TRAINER_LOCK)
	@command -v $(PYTHON312) >/dev/null || { echo "error: $(PYTHON312) not found; install Python 3.12 (SkyRL 0.4.0 needs >=3.12) or set PYTHON312=" >&2; exit 2; }
	@test -x $(CONTRACT_PY) || $(PYTHON312) -m venv $(CONTRACT_VENV)
	@echo "contract: SkyRL 0.4.0 environment into $(CONTRACT_VENV) (first time: ~3 min, 5 GB)"
	sed -n 's/^\([A-Za-z0-9][^ ]*==[^ ]*\).*/\1/p' $(TRAINER_LOCK) > $(CONTRACT_VENV)/image-pins.txt
	$(CONTRACT_PY) -m pip install -q uv==$(UV_VERSION)
	$(CONTRACT_UV) pip install --python $(CONTRACT_PY) -q --compile-bytecode -r tests/contract/requirements.txt -c $(CONTRACT_VENV)/image-pins.txt
	FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE $(CONTRACT_UV) pip install --python $(CONTRACT_PY) -q --no-deps --no-build-isolation flash-attn==2.8.3
	rm -rf $(CONTRACT_VLLM_SITE)
	$(CONTRACT_UV) pip install --python $(CONTRACT_PY) -q --compile-bytecode --no-deps --target $(CONTRACT_VLLM_SITE) -r tests/contract/vllm-requirements.txt
	@touch $@

contract: $(CONTRACT_STAMP) ## the plugin against the real SkyRL 0.4.0 (Python 3.12 venv) + the trainer lock re-resolved
	PYTHONPATH=$(CURDIR) $(CONTRACT_PY) -m pytest -c tests/contract/pytest.ini tests/contract

lock-images: $(CONTRACT_STAMP) ## re-resolve containers/trainer/requirements.lock (uv, linux x86_64 / Python 3.12)
	PYTHONPATH=$(CURDIR) $(CONTRACT_PY) containers/lock.py

pin-bases: ## pin the images' base images by digest (needs Docker with buildx and the registry)
	$(PYTHON) containers/pin_bases.py serve trainer
	$(PYTHON) containers/pin_bases.py --check || true

# Both images, built where a Docker daemon is reachable, after every artifact they fetch is held against its
# publisher (containers/check_artifacts.py); each Dockerfile runs its image's own checks while it builds.
IMAGE_TAG ?= local
images: ## check the images' artifacts against their publishers, then build both (needs Docker)
	$(PYTHON) containers/check_artifacts.py
	@command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "error: images: no Docker daemon is reachable; the artifact check passed. Fix: start Docker, or build on a machine that has it (docs/deploy.md, Images)" >&2; exit 2; }
	docker build -f containers/trainer/Dockerfile -t skymaze-trainer:$(IMAGE_TAG) .
	docker build -f containers/serve/Dockerfile -t skymaze-serve:$(IMAGE_TAG) .
	@echo "next: docker push, or make deploy (docs/deploy.md, Images)" >&2

# One Qwen3-VL-8B LoRA policy step on a GPU with only torch, transformers and peft (no hub, vLLM or Ray): peak
# memory and step time beside skymaze plan's estimate. PRESET=tiny runs the same path on a CPU: 2.3 GB of RAM at
# its peak and 7 CPU s for the step (a 1,024-token sequence holding the recipe's 15 frames; /usr/bin/time -v on
# the project's 2-core machine); `--seq-len 9216`, the recipe's full length, peaks at 17.4 GB.
GPU_CHECK_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
PRESET ?=
gpu-check: ## one 8B LoRA forward/backward on a GPU, peak memory beside the plan (PRESET=tiny: on a CPU)
	PYTHONPATH=$(CURDIR) $(GPU_CHECK_PYTHON) -W ignore::FutureWarning -m benchmarks.gpu_check $(if $(PRESET),--preset $(PRESET))

synth: $(STAMP) ## offline `cdk synth` of every stack into cdk.out/ (no credentials, network or Docker)
	$(CDK) synth -q -c profile=$(or $(SIZE),$(DEFAULT_SIZE))
	@ls cdk.out/*.template.json

lint: $(STAMP) ## ruff, import-linter, cfn-lint, hadolint, shellcheck
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports
	$(CDK) synth -q -c profile=$(or $(SIZE),$(DEFAULT_SIZE))
	$(VENV)/bin/cfn-lint -r us-west-2 --non-zero-exit-code error cdk.out/*.template.json
	find containers -name Dockerfile -print0 | xargs -0 -r $(VENV)/bin/hadolint
	$(VENV)/bin/shellcheck .ci/run $$(find infra containers -name '*.sh')

bench: $(STAMP) ## benchmarks: figures as ratios against a baseline measured in the same run
	$(PY) -m pip install -q -r benchmarks/requirements.txt
	$(PY) -m benchmarks

rehearse: $(STAMP) ## pipeline check on CPU with a tiny model: GRPO vs its SFT start, served through the endpoint (seed 0: 305 CPU s; RUN=rehearsal.control=true adds the control)
	$(VENV)/bin/skymaze rehearse $(addprefix --set ,$(RUN))

study: $(STAMP) ## the pre-registered GRPO-vs-SFT-continued study, 6 seeds (docs/study.md; 291-399 CPU s a seed; SEEDS=0-5)
	$(VENV)/bin/skymaze study --seeds $(or $(SEEDS),0-5)

deploy: $(STAMP) ## cdk deploy --all for SIZE (needs AWS credentials and Docker)
	$(VENV)/bin/skymaze deploy $(if $(SIZE),--size $(SIZE))

destroy: $(STAMP) ## tear down Kubernetes objects that own AWS resources, then cdk destroy --all
	$(VENV)/bin/skymaze teardown $(if $(SIZE),--size $(SIZE))

lock: ## regenerate constraints.txt from the current venv
	{ echo "# Full transitive lock (pip freeze of a working venv), applied with -c by the Makefile."; \
	  echo "# Regenerate with: make lock"; \
	  $(PY) -m pip freeze --exclude-editable | sed 's/^torch==.*/torch==2.13.0/'; } > constraints.txt

clean: ## remove build outputs (keeps .venv and runs/)
	rm -rf cdk.out .pytest_cache .ruff_cache
