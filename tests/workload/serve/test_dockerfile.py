"""containers/serve/Dockerfile: Ray LLM base pinned to the project's Ray version."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "containers" / "serve" / "Dockerfile"


def test_base_is_the_ray_llm_image_of_the_pinned_ray():
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"^ARG RAY_LLM_BASE=(\S+)$", text, flags=re.MULTILINE)
    match = re.fullmatch(r"rayproject/ray-llm:(\d+\.\d+\.\d+)-py\d+-cu\d+", base)
    assert match, f"base {base!r} is not a pinned rayproject/ray-llm tag"
    pinned = re.search(
        r"^ray\[[^\]]*\]==(\S+)|^ray==(\S+)", (ROOT / "requirements.txt").read_text(), re.MULTILINE
    )
    assert pinned, "requirements.txt pins no ray version"
    assert match.group(1) == next(v for v in pinned.groups() if v)
    assert "FROM ${RAY_LLM_BASE}" in text
    assert f"ray.__version__ == '{match.group(1)}'" in text
