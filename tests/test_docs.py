"""README and the docs pages hold together: README stays short, and every relative link lands on a file and heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import docs

README_MAX_LINES = 250  # a newcomer reads README in one sitting; the rest lives in docs/, one page a job
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links() -> list[tuple[Path, str]]:
    return [(path, target) for path in docs.pages() for target in LINK.findall(path.read_text())
            if not re.match(r"[a-z]+:", target)]


def test_readme_is_short():
    lines = len(docs.README.read_text().splitlines())
    assert lines < README_MAX_LINES, f"README has {lines} lines; move detail into a docs/ page"


def test_readme_links_every_docs_page():
    readme = docs.README.read_text()
    missing = [p.name for p in docs.pages()[1:] if f"(docs/{p.name})" not in readme and p.name != "imports.md"]
    assert missing == [], f"README does not link these docs pages: {missing}"


@pytest.mark.parametrize(("page", "target"), links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_relative_link_resolves(page, target):
    file, _, anchor = target.partition("#")
    path = (page.parent / file).resolve() if file else page
    assert path.exists(), f"{page.name} links {target}: no such file"
    if anchor:
        assert anchor in anchors(path), f"{page.name} links {target}: no such heading in {path.name}"


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Rehearsal recipe `local`", "rehearsal-recipe-local"),
    ("Operations: watch, cost, tear down", "operations-watch-cost-tear-down"),
    ("1. Deploy and reach the Ray head", "1-deploy-and-reach-the-ray-head"),
])
def test_slug_is_githubs(heading, anchor):
    assert slug(heading) == anchor


# Upper-case names the pages cite that other software defines (each checked against its owner, not this tree).
EXTERNAL_NAMES = {
    "AWS_SESSION_TOKEN": "AWS SDKs' credentials environment", "CREATE_FAILED": "CloudFormation stack status",
    "DELETE_FAILED": "CloudFormation stack status", "DELETE_SKIPPED": "CloudFormation resource status",
    "CUDA_HOME": "CUDA toolkit", "HF_ENDPOINT": "huggingface_hub", "NCCL_CUMEM_ENABLE": "NCCL", "NCCL_DEBUG_SUBSYS": "NCCL", "PYTORCH_CUDA_ALLOC_CONF": "PyTorch", "RAY_DATA_PER_NODE_METRICS": "Ray Data",
    "SKYRL_LOG_FILE": "SkyRL",
}
CONSTANT = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
MANUAL_TEST = docs.ROOT / "infra" / "MANUAL_TEST.md"


def _sources() -> str:
    """Every tracked file but the pages and the tests: where a name the pages cite must be defined or read."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=docs.ROOT, capture_output=True, text=True, check=True,
                             timeout=60).stdout.split()
    keep = [docs.ROOT / f for f in tracked if not f.endswith((".md", ".png")) and not f.startswith("tests/")]
    return "\n".join(path.read_text(errors="ignore") for path in keep if path.is_file())


def test_every_upper_case_name_the_pages_cite_exists_in_the_code_or_is_another_projects():
    """serve.md cited `SERVE_REPLICAS`, which no code defines (the endpoint runs gpus_per_worker replicas)."""
    cited = {name for path in [*docs.pages(), MANUAL_TEST] for span in re.findall(r"`([^`\n]+)`", path.read_text())
             for name in CONSTANT.findall(span)}
    sources = _sources()
    assert sorted(name for name in cited - set(EXTERNAL_NAMES) if name not in sources) == []
    assert sorted(set(EXTERNAL_NAMES) - cited) == [], "names no page cites any more: drop them from EXTERNAL_NAMES"


def test_the_runbooks_skymaze_commands_parse_and_name_the_size_with_its_flag():
    """MANUAL_TEST.md said `skymaze plan --profile blog`: --profile is the size's old name (an AWS profile to aws)."""
    from tests.test_readme_commands import check, readme_commands
    from workload.cli._common import OLD_SIZE_FLAG

    commands = readme_commands(MANUAL_TEST.read_text())
    assert len(commands) >= 4
    for command, complete in commands:
        check(command.removesuffix(" ..."), complete=complete)  # a runbook row elides what it does not change
        assert OLD_SIZE_FLAG not in command.split(), command


def test_the_make_lint_row_names_every_tool_the_target_runs():
    """development.md's `make lint` row left out import-linter (`lint-imports`)."""
    makefile = (docs.ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    tools = set(re.findall(r"\$\(VENV\)/bin/([\w-]+)|-m (\w+)", recipe))
    tools = {name for pair in tools for name in pair if name}
    assert {"ruff", "lint-imports", "cfn-lint", "hadolint", "shellcheck"} <= tools, tools
    (row,) = [line for line in docs.page("development.md").splitlines() if line.startswith("| `make lint` |")]
    assert sorted(tool for tool in tools if tool not in row) == []
