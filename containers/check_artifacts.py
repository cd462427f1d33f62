"""Every external artifact an image build fetches, held against the publisher that serves it.

    python containers/check_artifacts.py    # exit 1 listing each artifact no cited source publishes

The base images and the off-PyPI wheels of containers/*/Dockerfile and containers/trainer/off-pypi.txt
are compared with recorded excerpts of their publishers' own files (tests/infra/artifact_reference/*.json,
each naming repository, commit and path): Ray's LLM image guard and tag format at the pinned Ray, SkyRL's
Dockerfile, and SkyRL's pyproject.toml / uv.lock for each wheel's exact URL and sha256. A base tag Ray does
not build, a wheel version no cited file names (one made from a naming pattern), a wheel without a sha256,
or a URL or hash that differs from the publisher's, is a problem. PyPI packages are held by the lock's own
hashes (containers/lock.py); this check covers what PyPI does not serve.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "infra" / "artifact_reference"
SERVE_DOCKERFILE = ROOT / "containers" / "serve" / "Dockerfile"
TRAINER_DOCKERFILE = ROOT / "containers" / "trainer" / "Dockerfile"
OFF_PYPI = ROOT / "containers" / "trainer" / "off-pypi.txt"
REMOVED = ROOT / "containers" / "trainer" / "removed.txt"

_DIGEST = r"(?:@sha256:[0-9a-f]{64})?"
_RAY_LLM_BASE = re.compile(r"^ARG RAY_LLM_BASE=(?P<repo>[^:\s]+):(?P<ray>\d+\.\d+\.\d+)-(?P<py>py\d+)-(?P<cuda>cu\d+)"
                           + _DIGEST + r"$", re.M)
_SKYRL_BASE = re.compile(r"^ARG SKYRL_BASE=(?P<image>[^@\s]+)" + _DIGEST + r"$", re.M)
_URL_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*) @ (?P<url>https://\S+)"
                       r"(?: --hash=sha256:(?P<sha>[0-9a-f]{64}))?$")
_INDEX_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+) (?P<index>https://\S+)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def reference(name: str, folder: Path = REFERENCE) -> dict:
    """The recorded facts of one publisher; every source names its commit (or its file's sha256)."""
    data = json.loads((folder / f"{name}.json").read_text())
    for source in data["source"]:
        pinned = re.fullmatch(r"[0-9a-f]{40}", source.get("commit", "")) or re.fullmatch(
            r"[0-9a-f]{64}", source.get("sha256", ""))
        if not pinned:
            raise ValueError(f"{name}.json: source {source['url']} names neither a commit nor a sha256")
    return data["facts"]


def serve_base_problems(dockerfile: str, ray: dict) -> list[str]:
    """The serve image's base against Ray's LLM image matrix at the pinned Ray."""
    found = _RAY_LLM_BASE.findall(dockerfile)
    if len(found) != 1:
        return ["containers/serve/Dockerfile: expected one `ARG RAY_LLM_BASE=<repo>:<ray>-py<XY>-cu<XYZ>` line"]
    repo, version, python, cuda = found[0]
    problems = []
    if repo != ray["repository"]:
        problems.append(f"serve base {repo}: Ray publishes its LLM image as {ray['repository']}")
    if version != ray["ray_version"]:
        problems.append(f"serve base Ray {version}: the cited Ray release is {ray['ray_version']}")
    if f"ray.__version__ == '{version}'" not in dockerfile:
        problems.append(f"containers/serve/Dockerfile does not check that the image's Ray is {version}")
    built = ray["python_to_cuda"]
    if python not in built:
        problems.append(f"serve base tag {repo}:{version}-{python}-{cuda} does not exist: Ray's "
                        "docker/ray-llm/Dockerfile "
                        f"builds {', '.join(f'{p}-{c}' for p, c in built.items())} only and exits on {python}. "
                        f"Fix: use {repo}:{version}-{next(iter(built))}-{built[next(iter(built))]}.")
    elif built[python] != cuda:
        problems.append(f"serve base tag {repo}:{version}-{python}-{cuda} does not exist: Ray builds {python} with "
                        f"{built[python]}. Fix: use {repo}:{version}-{python}-{built[python]}.")
    return problems


def trainer_base_problems(dockerfile: str, skyrl: dict) -> list[str]:
    """The trainer image's base against the one SkyRL's own Dockerfile builds on."""
    found = _SKYRL_BASE.findall(dockerfile)
    if len(found) != 1:
        return ["containers/trainer/Dockerfile: expected one `ARG SKYRL_BASE=<image>` line"]
    if found[0] != skyrl["trainer_base"]:
        return [f"trainer base {found[0]}: SkyRL's docker/Dockerfile builds on {skyrl['trainer_base']}"]
    return []


def off_pypi_problems(text: str, skyrl: dict, removed: set[str]) -> list[str]:
    """Each off-PyPI wheel against SkyRL's pyproject (exact URL) and uv.lock (sha256)."""
    wheels, indexes = skyrl["wheels"], skyrl["indexes"]
    problems, seen = [], set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"off-pypi.txt:{number}"
        by_url, by_index = _URL_LINE.match(line), _INDEX_LINE.match(line)
        if by_url:
            name, url, sha = normalize(by_url["name"]), by_url["url"], by_url["sha"]
            seen.add(name)
            cited = wheels.get(name)
            if cited is None:
                problems.append(f"{where}: no cited source publishes {name} at {url}")
                continue
            if url != cited["url"]:
                problems.append(f"{where}: {name} from {url}, but SkyRL's pyproject.toml names {cited['url']}")
            if sha is None:
                problems.append(f"{where}: {name} has no sha256; SkyRL's uv.lock records sha256:{cited['sha256']}")
            elif sha != cited["sha256"]:
                problems.append(f"{where}: {name} sha256:{sha} differs from SkyRL's uv.lock sha256:{cited['sha256']}")
        elif by_index:
            name, version, index = normalize(by_index["name"]), by_index["version"], by_index["index"]
            seen.add(name)
            problems.append(f"{where}: {name}=={version} from {index} has no sha256; every off-PyPI wheel is "
                            "pinned by URL and sha256")
            if name in wheels:
                problems.append(f"{where}: no cited source publishes {name}=={version} (a version made by a naming "
                                f"pattern); SkyRL installs {wheels[name]['url']}")
            elif name in indexes and index.rstrip("/") != indexes[name].rstrip("/"):
                problems.append(f"{where}: {name} from {index}, but SkyRL names the index {indexes[name]}")
            elif name not in indexes:
                problems.append(f"{where}: no cited source names an index for {name}")
        else:
            problems.append(f"{where}: {line!r} is neither '<name> @ <URL> --hash=sha256:<hex>' nor a pin")
    for name, cited in sorted(wheels.items()):
        if name not in seen:
            problems.append(f"off-pypi.txt lacks {name}: skyrl[fsdp] installs it from {cited['url']}")
    for name in sorted(set(indexes) - seen - removed):
        problems.append(f"{name} is neither pinned in off-pypi.txt nor left out in removed.txt")
    return problems


def install_problems(dockerfile: str) -> list[str]:
    """The trainer Dockerfile installs the off-PyPI wheels with pip checking each sha256."""
    if not re.search(r"pip install [^\n]*--require-hashes -r off-pypi\.txt", dockerfile):
        return ["containers/trainer/Dockerfile does not install off-pypi.txt with --require-hashes"]
    return []


def all_problems(root: Path = ROOT) -> list[str]:
    containers = root / "containers"
    skyrl, ray = reference("skyrl", root / "tests" / "infra" / "artifact_reference"), reference(
        "ray", root / "tests" / "infra" / "artifact_reference")
    serve = (containers / "serve" / "Dockerfile").read_text()
    trainer = (containers / "trainer" / "Dockerfile").read_text()
    removed = {normalize(line.strip()) for line in (containers / "trainer" / "removed.txt").read_text().splitlines()
               if line.strip() and not line.lstrip().startswith("#")}
    return (serve_base_problems(serve, ray) + trainer_base_problems(trainer, skyrl)
            + off_pypi_problems((containers / "trainer" / "off-pypi.txt").read_text(), skyrl, removed)
            + install_problems(trainer))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    problems = all_problems()
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if problems:
        print("Fix: read the artifact from its publisher's file at a cited commit and record it in "
              "tests/infra/artifact_reference/ (never extend a naming pattern).", file=sys.stderr)
        return 1
    print("artifacts: both base images and every off-PyPI wheel match their publishers' cited files")
    print("next: make images", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
