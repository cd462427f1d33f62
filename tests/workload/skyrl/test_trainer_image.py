"""containers/: the trainer's base Ray, its lock, its off-PyPI wheels and the Dockerfile agree; serve adds no packages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workload.skyrl.image_check import (
    build_ties,
    cuda_of_lock,
    installed_problems,
    normalize,
    off_pypi,
    overridden,
    pins,
    removed,
    unmet_requirements,
)
from workload.skyrl.known_keys import SKYRL_VERSION

ROOT = Path(__file__).resolve().parents[3]
TRAINER = ROOT / "containers" / "trainer"


def test_the_build_checks_the_ray_of_the_base_image_it_names():
    text = (TRAINER / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG SKYRL_BASE=(\S+)$", text, re.M)
    # a versioned tag (Ray, Python, CUDA), never a moving one like `latest`
    tag = re.fullmatch(r"anyscale/ray:(\d+\.\d+\.\d+)-py312-cu(\d+)(@sha256:[0-9a-f]{64})?", base)
    assert tag, f"SKYRL_BASE {base!r} is not a versioned Ray image for Python 3.12"
    assert re.search(r"^FROM \$\{SKYRL_BASE\}$", text, re.M)
    assert f"ray.__version__ == '{tag.group(1)}'" in text
    major, minor = cuda_of_lock(LOCKED)
    assert tag.group(2) == f"{major}{minor}"  # cu130 = CUDA 13.0, that of the lock's torch


def _inputs() -> dict[str, str]:
    return dict(
        re.match(r"([A-Za-z0-9_.\[\]-]+)==(\S+)", line).groups()
        for line in (TRAINER / "requirements.in").read_text().splitlines()
        if line and not line.startswith("#")
    )


LOCKED = pins((TRAINER / "requirements.lock").read_text())
WHEELS = off_pypi((TRAINER / "off-pypi.txt").read_text())


def test_skyrl_pin_is_the_version_the_validator_knows():
    assert _inputs()["skyrl[fsdp]"] == SKYRL_VERSION
    assert _inputs()["skyrl-gym"] == SKYRL_VERSION


def test_every_input_is_pinned_exactly():
    for line in (TRAINER / "requirements.in").read_text().splitlines():
        if line and not line.startswith("#"):
            assert "==" in line, line


def test_the_lock_holds_every_input_at_its_pinned_version():
    for name, version in _inputs().items():
        assert LOCKED[normalize(name.split("[")[0])] == version, name


def test_every_locked_package_carries_a_sha256():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", (TRAINER / "requirements.lock").read_text())
    for block in blocks:
        if re.match(r"[A-Za-z0-9]", block):
            assert "--hash=sha256:" in block, block.splitlines()[0]
    assert len(LOCKED) > 200  # skyrl[fsdp] pulls in vLLM, Ray, torch and their CUDA wheels


def test_numpy_admits_vllms_mistral_common():
    # vllm 0.30.0 -> mistral-common[image]>=1.11.6 -> numpy>=1.25,<2.4 on Python 3.12 (PyPI METADATA);
    # the earlier numpy==2.4.6 pin made the image unresolvable.
    assert tuple(int(p) for p in LOCKED["numpy"].split(".")[:2]) < (2, 4)


def test_off_pypi_wheels_are_pinned_by_https_url_and_kept_out_of_the_lock():
    assert {name for name, _v, _u in WHEELS} == {"flash-attn", "causal-conv1d", "vllm-router"}
    for name, version, url in WHEELS:
        assert name not in LOCKED, name
        assert url.startswith("https://github.com/") and url.endswith(".whl"), (name, url)
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+]*", version), (name, version)


def test_an_off_pypi_line_without_its_hash_or_with_a_version_pin_is_refused():
    with pytest.raises(ValueError, match=r"off-pypi\.txt:1: .* is not '<name> @ <https wheel URL> --hash=sha256:<64 hex>'"):
        off_pypi("flash-attn==2.8.3+cu.13.0.torch.2.13 https://wheels.astral.sh/simple/cu130/\n")
    url = "https://github.com/SumanthRH/router/releases/download/0.1.14.post1/vllm_router-0.1.14.post1-cp38-abi3-manylinux_2_35_x86_64.whl"
    with pytest.raises(ValueError, match=r"off-pypi\.txt:1: .* is not '<name> @ <https wheel URL>"):
        off_pypi(f"vllm-router @ {url}\n")
    with pytest.raises(ValueError, match=r"off-pypi\.txt:1: the URL holds vllm-router, not flash-attn"):
        off_pypi(f"flash-attn @ {url} --hash=sha256:{'a' * 64}\n")


def test_off_pypi_wheels_are_built_for_the_locks_torch_and_cuda():
    assert LOCKED["torch"] == "2.13.0" and cuda_of_lock(LOCKED) == (13, 0)
    assert build_ties(LOCKED, WHEELS) == []


def test_a_wheel_built_for_another_torch_is_named():
    stale = [("flash-attn", "2.8.3+cu.13.0.torch.2.12.fa4b28.skyrl1", "https://github.com/x/y/releases/download/a/f.whl"),
             ("causal-conv1d", "1.6.2.post1", "https://github.com/NovaSky-AI/skyrl-wheels/releases/download/cu13torch2.11/c.whl"),
             ("flashinfer-jit-cache", "0.6.18.post1+cu129", "https://flashinfer.ai/whl/cu129")]
    problems = build_ties(LOCKED, stale)
    assert "flash-attn==2.8.3+cu.13.0.torch.2.12.fa4b28.skyrl1: built for torch 2.12 / CUDA 13.0" in problems[0]
    assert "causal-conv1d==1.6.2.post1: release cu13torch2.11 is built for torch 2.11 / CUDA 13" in problems[1]
    assert "flashinfer-jit-cache==0.6.18.post1+cu129: built for CUDA 12.9" in problems[2]


def test_build_check_names_a_version_drift_and_an_unmet_requirement():
    installed = {"torch": "2.12.0", "einops": "0.8.2", "flash-attn": "2.8.3+cu.13.0.torch.2.13"}
    problems = installed_problems(
        {"torch": "2.13.0", "einops": "0.8.2"},
        [("flash-attn", "2.8.3+cu.13.0.torch.2.13", "https://wheels.astral.sh/simple/cu130/")],
        installed.get,
        lambda name: ["torch==2.13.*", "einops", 'pytest; extra == "test"'],
    )
    assert problems == [
        "torch: pinned 2.13.0, installed 2.12.0",
        "flash-attn requires torch==2.13.*, installed 2.12.0",
    ]


def test_dockerfile_installs_the_lock_and_the_off_pypi_wheels_with_hashes():
    text = (TRAINER / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --no-deps --require-hashes -r requirements.lock" in text
    assert "pip install --no-cache-dir --no-deps --require-hashes -r off-pypi.txt" in text
    assert "extra-index-url" not in text and "--index-url" not in text  # nothing resolved from another index
    assert "python -m workload.skyrl.image_check requirements.lock off-pypi.txt removed.txt overridden.txt" in text
    assert re.search(r"^COPY .*containers/trainer/requirements\.lock containers/trainer/off-pypi\.txt "
                     r"containers/trainer/removed\.txt containers/trainer/overridden\.txt", text, re.M)


def test_only_the_fa4_requirements_of_skyrls_flash_attn_are_left_unmet():
    accepted = overridden((TRAINER / "overridden.txt").read_text())
    assert accepted == {("flash-attn", "apache-tvm-ffi"), ("flash-attn", "nvidia-cutlass-dsl"),
                        ("flash-attn", "quack-kernels")}
    # The wheel's metadata (SkyRL's uv.lock 027ffd8b) against the lock: those three differ, the rest are met.
    flash_attn = ["apache-tvm-ffi==0.1.12", "einops", "nvidia-cutlass-dsl[cu13]==4.6.2", "quack-kernels[cu13]==0.6.4",
                  "torch==2.13.0", "torch-c-dlpack-ext", "typing-extensions", 'pytest; extra == "dev"']
    distributions = [("flash-attn", WHEELS[0][1], flash_attn)] + [(n, v, []) for n, v in LOCKED.items()]
    assert len(unmet_requirements(distributions, allowed_missing=set(), environment={"sys_platform": "linux"})) == 3
    assert unmet_requirements(distributions, allowed_missing=set(), environment={"sys_platform": "linux"},
                              accepted=accepted) == []
    with pytest.raises(ValueError, match="is not '<package> <requirement name>'"):
        overridden("flash-attn\n")


def test_the_environment_check_is_pip_checks_rule_with_only_the_removed_packages_missing():
    distributions = [
        ("nixl", "1.5.1", ["nixl-cu12==1.5.1", "nixl-cu13==1.5.1"]),
        ("nixl-cu13", "1.5.1", []),
        ("vllm", "0.30.0", ["torch==2.13.0", "torchaudio==2.11.0", "humming-kernels[cu13]==0.1.12",
                            'pytest; extra == "test"', "pywin32; sys_platform == 'win32'"]),
        ("torch", "2.13.0+cu130", []),
        ("humming-kernels", "0.1.12", []),
        ("base-tool", "1.0", ["numpy<2"]),
        ("numpy", "2.3.5", []),
    ]
    problems = unmet_requirements(distributions, allowed_missing={"nixl-cu12"},
                                  environment={"sys_platform": "linux"})
    assert problems == [
        "base-tool 1.0 requires numpy<2, installed 2.3.5",
        "vllm 0.30.0 requires torchaudio==2.11.0, which is not installed",
    ]


def test_the_packages_skyrl_removes_are_left_out_of_the_lock():
    left_out = removed((TRAINER / "removed.txt").read_text())
    assert left_out == {"nixl-cu12", "flashinfer-jit-cache", "flashinfer-cubin"}
    assert not left_out & set(LOCKED)
    assert "nixl" in LOCKED and "nixl-cu13" in LOCKED


def test_the_cuda_compiler_and_headers_are_the_runtimes_release():
    # torch 2.13.0 -> cuda-toolkit 13.0.3.0 -> runtime 13.0.96; its compiler set is 13.0.88 / cccl 13.0.85
    assert LOCKED["nvidia-cuda-runtime"].startswith("13.0.")
    for name in ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl", "nvidia-nvjitlink",
                 "nvidia-cuda-nvrtc"):
        assert LOCKED[name].startswith("13.0."), (name, LOCKED[name])


def test_serve_image_adds_no_packages_to_rays_llm_image():
    # Ray's image already holds Ray, vLLM and their stack; the project installs only itself, --no-deps.
    installs = re.findall(r"pip install[^\n&\\]*", (ROOT / "containers" / "serve" / "Dockerfile").read_text())
    assert [line.strip() for line in installs] == ["pip install --no-cache-dir --no-deps ."]




def test_the_contract_environment_runs_the_images_versions():
    # make contract installs tests/contract/requirements.txt under the trainer lock's pins, so a
    # pin there that differs from the image would make the install fail; this says which one.
    contract = pins((ROOT / "tests" / "contract" / "requirements.txt").read_text())
    assert contract["skyrl"] == contract["skyrl-gym"] == SKYRL_VERSION
    differing = {name: (version, LOCKED[name]) for name, version in contract.items() if name in LOCKED and LOCKED[name] != version}
    assert differing == {}
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^UV_VERSION := {re.escape(contract['uv'])}$", makefile, re.M)
