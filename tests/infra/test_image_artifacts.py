"""Every artifact an image build fetches against the publisher that serves it (containers/check_artifacts.py).

``artifact_reference/*.json`` record, with repository, commit and path, the excerpts of Ray's and SkyRL's own
files that name each base image and off-PyPI wheel; the check fails on a tag Ray does not build, a version
made from a naming pattern, a wheel without a sha256, and a URL or hash that differs from the publisher's.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from workload.skyrl.image_check import off_pypi_wheels

_spec = importlib.util.spec_from_file_location("check_artifacts", ROOT / "containers" / "check_artifacts.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

SKYRL = check.reference("skyrl")
RAY = check.reference("ray")
SERVE = (ROOT / "containers" / "serve" / "Dockerfile").read_text()
TRAINER = (ROOT / "containers" / "trainer" / "Dockerfile").read_text()
OFF_PYPI = (ROOT / "containers" / "trainer" / "off-pypi.txt").read_text()

# What the Dockerfiles and off-pypi.txt named before they were held to their publishers' files.
UNCITED_SERVE_BASE = "ARG RAY_LLM_BASE=rayproject/ray-llm:2.60.0-py311-cu128"
PATTERN_WHEELS = """\
flash-attn==2.8.3+cu.13.0.torch.2.13 https://wheels.astral.sh/simple/cu130/
causal-conv1d==1.6.2.post1+cu.13.0.torch.2.13 https://wheels.astral.sh/simple/cu130/
flashinfer-jit-cache==0.6.18.post1+cu130 https://flashinfer.ai/whl/cu130
flashinfer-cubin==0.6.18.post1 https://flashinfer.ai/whl
"""


def test_the_images_fetch_only_what_their_publishers_name():
    assert check.all_problems() == []


def test_the_serve_base_tag_ray_does_not_build_is_refused():
    old = SERVE.replace("ARG RAY_LLM_BASE=rayproject/ray-llm:2.60.0-py312-cu130", UNCITED_SERVE_BASE)
    assert old != SERVE
    assert check.serve_base_problems(old, RAY) == [
        "serve base tag rayproject/ray-llm:2.60.0-py311-cu128 does not exist: Ray's docker/ray-llm/Dockerfile builds "
        "py312-cu130 only and exits on py311. Fix: use rayproject/ray-llm:2.60.0-py312-cu130."
    ]


def test_a_py312_tag_with_another_cuda_is_refused():
    wrong = SERVE.replace("2.60.0-py312-cu130", "2.60.0-py312-cu128")
    assert check.serve_base_problems(wrong, RAY) == [
        "serve base tag rayproject/ray-llm:2.60.0-py312-cu128 does not exist: Ray builds py312 with cu130. "
        "Fix: use rayproject/ray-llm:2.60.0-py312-cu130."
    ]


def test_a_serve_base_of_another_ray_than_the_cited_release_is_refused():
    other = SERVE.replace("ray-llm:2.60.0-", "ray-llm:2.61.0-")
    problems = check.serve_base_problems(other, RAY)
    assert "serve base Ray 2.61.0: the cited Ray release is 2.60.0" in problems
    assert "containers/serve/Dockerfile does not check that the image's Ray is 2.61.0" in problems


def test_the_trainer_base_is_the_one_skyrls_dockerfile_builds_on():
    assert SKYRL["trainer_base"] == "anyscale/ray:2.57.0-py312-cu130"
    other = TRAINER.replace("ARG SKYRL_BASE=anyscale/ray:2.57.0-py312-cu130", "ARG SKYRL_BASE=anyscale/ray:2.57.0-py312-cu129")
    assert check.trainer_base_problems(other, SKYRL) == [
        "trainer base anyscale/ray:2.57.0-py312-cu129: SkyRL's docker/Dockerfile builds on anyscale/ray:2.57.0-py312-cu130"
    ]


def test_wheels_made_from_a_naming_pattern_and_without_hashes_are_refused():
    problems = check.off_pypi_problems(PATTERN_WHEELS, SKYRL, removed=set())
    assert ("off-pypi.txt:1: no cited source publishes flash-attn==2.8.3+cu.13.0.torch.2.13 (a version made by a naming "
            f"pattern); SkyRL installs {SKYRL['wheels']['flash-attn']['url']}") in problems
    assert any(p.startswith("off-pypi.txt:2: no cited source publishes causal-conv1d==1.6.2.post1+cu.13.0.torch.2.13")
               for p in problems)
    no_hash = [p for p in problems if "has no sha256" in p]
    assert len(no_hash) == 4  # every line, FlashInfer's included
    assert "off-pypi.txt lacks vllm-router: skyrl[fsdp] installs it from " + SKYRL["wheels"]["vllm-router"]["url"] in problems


def test_a_wheel_url_without_its_hash_is_refused():
    line = OFF_PYPI.splitlines()[-1]
    stripped = OFF_PYPI.replace(line, line.split(" --hash=")[0])
    (problem,) = check.off_pypi_problems(stripped, SKYRL, removed={"flashinfer-jit-cache", "flashinfer-cubin"})
    assert problem.endswith("vllm-router has no sha256; SkyRL's uv.lock records sha256:"
                            + SKYRL["wheels"]["vllm-router"]["sha256"])


def test_a_hash_or_url_other_than_the_publishers_is_refused():
    cited = SKYRL["wheels"]["causal-conv1d"]
    changed = OFF_PYPI.replace(cited["sha256"], "0" * 64).replace(cited["url"], cited["url"].replace("cp312-cp312", "cp313-cp313"))
    problems = check.off_pypi_problems(changed, SKYRL, removed={"flashinfer-jit-cache", "flashinfer-cubin"})
    assert len(problems) == 2
    assert "but SkyRL's pyproject.toml names " + cited["url"] in problems[0]
    assert f"causal-conv1d sha256:{'0' * 64} differs from SkyRL's uv.lock sha256:{cited['sha256']}" in problems[1]


def test_a_wheel_no_cited_source_publishes_is_refused():
    extra = OFF_PYPI + "mamba-ssm @ https://github.com/NovaSky-AI/skyrl-wheels/releases/download/cu13torch2.13/" \
                       "mamba_ssm-2.3.2.post1-cp312-cp312-linux_x86_64.whl --hash=sha256:" + "1" * 64 + "\n"
    problems = check.off_pypi_problems(extra, SKYRL, removed={"flashinfer-jit-cache", "flashinfer-cubin"})
    assert len(problems) == 1 and problems[0].startswith("off-pypi.txt:") and "no cited source publishes mamba-ssm" in problems[0]


def test_flashinfers_wheels_are_left_out_until_a_hash_is_recorded():
    assert set(SKYRL["without_recorded_hash"]) == set(SKYRL["indexes"]) == {"flashinfer-jit-cache", "flashinfer-cubin"}
    problems = check.off_pypi_problems(OFF_PYPI, SKYRL, removed=set())
    assert problems == [f"{name} is neither pinned in off-pypi.txt nor left out in removed.txt"
                        for name in ("flashinfer-cubin", "flashinfer-jit-cache")]


def test_the_trainer_installs_the_wheels_checking_each_hash():
    assert check.install_problems(TRAINER) == []
    assert check.install_problems(TRAINER.replace("--require-hashes -r off-pypi.txt", "-r off-pypi.txt")) == [
        "containers/trainer/Dockerfile does not install off-pypi.txt with --require-hashes"]


def test_the_wheel_versions_are_read_from_the_publishers_file_names():
    versions = {name: version for name, version, _url, _sha in off_pypi_wheels(OFF_PYPI)}
    assert versions == {"flash-attn": "2.8.3+cu.13.0.torch.2.13.fa4b28.skyrl1", "causal-conv1d": "1.6.2.post1",
                        "vllm-router": "0.1.14.post1"}


def test_each_reference_source_names_its_commit(tmp_path):
    data = json.loads((check.REFERENCE / "ray.json").read_text())
    data["source"][0]["commit"] = "main"
    (tmp_path / "ray.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"ray\.json: source https://github\.com/ray-project/ray/blob/.* names neither a commit nor a sha256"):
        check.reference("ray", tmp_path)


def test_the_command_reports_on_stdout_and_names_the_next_step():
    done = subprocess.run([sys.executable, "containers/check_artifacts.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("artifacts: both base images and every off-PyPI wheel match")
    assert done.stderr.strip() == "next: make images"
