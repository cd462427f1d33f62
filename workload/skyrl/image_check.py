"""The trainer image's dependency files, and the build-time check that the image holds them.

``containers/trainer/requirements.lock`` is the resolver's lock of the PyPI packages (with
sha256 hashes); ``containers/trainer/off-pypi.txt`` pins the wheels PyPI does not carry,
each with its index; ``containers/trainer/removed.txt`` names the packages SkyRL's own uv
configuration removes. ``containers/lock.py`` writes and re-checks the lock; the Dockerfile
runs ``python -m workload.skyrl.image_check LOCK OFF_PYPI REMOVED`` after installing both, so
an image whose packages disagree with either file, or in which any installed distribution
(the base image's included) has a requirement that is not met (``pip check``'s rule; only the
removed packages may be missing), fails its build instead of its first job.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s\\;]+)")
# Astral's GPU wheels carry their (CUDA, torch) build in the local version: +cu.13.0.torch.2.13.
ASTRAL_LOCAL = re.compile(r"\+cu\.(\d+)\.(\d+)\.torch\.(\d+)\.(\d+)$")
# FlashInfer's per-CUDA index versions its JIT cache +cu130.
CUDA_LOCAL = re.compile(r"\+cu(\d+)(\d)$")


def normalize(name: str) -> str:
    """PEP 503 name: ``Flash_Attn`` -> ``flash-attn``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``{normalized name: version}`` of every ``name==version`` line (hash and comment lines skipped)."""
    out = {}
    for line in text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            out[normalize(match.group(1))] = match.group(2)
    return out


def off_pypi(text: str, *, source: str = "off-pypi.txt") -> list[tuple[str, str, str]]:
    """``(name, version, index URL)`` of each line; raises ``ValueError`` naming a malformed line."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        match = _PIN.match(parts[0]) if len(parts) == 2 else None
        if not match or not parts[1].startswith("https://"):
            raise ValueError(
                f"{source}:{number}: {line!r} is not '<name>==<exact version> <https index URL>'. "
                "Fix: pin one wheel a line with the index that publishes it."
            )
        rows.append((normalize(match.group(1)), match.group(2), parts[1]))
    return rows


def removed(text: str) -> set[str]:
    """The normalized names of ``removed.txt`` (one a line, ``#`` comments)."""
    return {normalize(line.strip()) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")}


def unmet_requirements(
    distributions: list[tuple[str, str, list[str]]],
    *,
    allowed_missing: set[str],
    environment: dict[str, str] | None = None,
) -> list[str]:
    """``pip check`` over ``(name, version, requires)`` of every installed distribution.

    A requirement counts when its marker holds here without extras (as pip check does); it is
    unmet when the package is absent or at a version outside the specifier. Absent packages in
    ``allowed_missing`` are accepted (removed on purpose); at a wrong version they are not.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    installed = {normalize(name): version for name, version, _requires in distributions}
    problems = []
    for name, version, requires in sorted(distributions):
        for text in requires:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                problems.append(f"{name} {version} declares an unparsable requirement {text!r}")
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({**(environment or {}), "extra": ""}):
                continue
            wanted = normalize(requirement.name)
            have = installed.get(wanted)
            if have is None:
                if wanted not in allowed_missing:
                    problems.append(f"{name} {version} requires {text}, which is not installed")
            elif not requirement.specifier.contains(have, prereleases=True):
                problems.append(f"{name} {version} requires {text}, installed {have}")
    return problems


def _installed_distributions() -> list[tuple[str, str, list[str]]]:
    seen, out = set(), []
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or normalize(name) in seen:
            continue  # the first on sys.path wins, as for imports
        seen.add(normalize(name))
        out.append((name, dist.version, list(dist.requires or [])))
    return out


def cuda_of_lock(locked: dict[str, str]) -> tuple[int, int]:
    """The CUDA (major, minor) the locked torch runs on: that of its ``nvidia-cuda-runtime`` wheel."""
    major, minor = locked["nvidia-cuda-runtime"].split(".")[:2]
    return int(major), int(minor)


def build_ties(locked: dict[str, str], wheels: list[tuple[str, str, str]]) -> list[str]:
    """Off-PyPI wheels built for another torch or CUDA than the lock's (one line each)."""
    torch_minor = tuple(int(p) for p in locked["torch"].split("+")[0].split(".")[:2])
    cuda = cuda_of_lock(locked)
    problems = []
    for name, version, _index in wheels:
        astral = ASTRAL_LOCAL.search(version)
        flashinfer = CUDA_LOCAL.search(version)
        if astral:
            built_cuda = (int(astral.group(1)), int(astral.group(2)))
            built_torch = (int(astral.group(3)), int(astral.group(4)))
            if built_torch != torch_minor or built_cuda != cuda:
                problems.append(
                    f"{name}=={version}: built for torch {built_torch[0]}.{built_torch[1]} / CUDA "
                    f"{built_cuda[0]}.{built_cuda[1]}, the lock installs torch {locked['torch']} on CUDA "
                    f"{cuda[0]}.{cuda[1]}. Fix: pin +cu.{cuda[0]}.{cuda[1]}.torch.{torch_minor[0]}.{torch_minor[1]}."
                )
        elif flashinfer and (int(flashinfer.group(1)), int(flashinfer.group(2))) != cuda:
            problems.append(
                f"{name}=={version}: built for CUDA {flashinfer.group(1)}.{flashinfer.group(2)}, the lock's torch "
                f"runs on CUDA {cuda[0]}.{cuda[1]}. Fix: pin +cu{cuda[0]}{cuda[1]} from that CUDA's index."
            )
    return problems


def installed_problems(
    locked: dict[str, str],
    wheels: list[tuple[str, str, str]],
    version_of: Callable[[str], str | None],
    requires_of: Callable[[str], list[str]],
) -> list[str]:
    """What the environment lacks: a lock or off-PyPI pin at another version, or an unmet requirement."""
    from packaging.requirements import Requirement

    problems = []
    wanted = {**locked, **{name: version for name, version, _index in wheels}}
    for name, version in sorted(wanted.items()):
        have = version_of(name)
        if have != version:
            problems.append(f"{name}: pinned {version}, installed {have or 'nothing'}")
    for name, _version, _index in wheels:
        for text in requires_of(name):
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            have = version_of(normalize(requirement.name))
            if have is None or not requirement.specifier.contains(have, prereleases=True):
                problems.append(f"{name} requires {text}, installed {have or 'nothing'}")
    return problems


def _version_of(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m workload.skyrl.image_check LOCK OFF_PYPI REMOVED``: exit 1 listing every mismatch."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m workload.skyrl.image_check requirements.lock off-pypi.txt removed.txt", file=sys.stderr)
        return 2
    locked = pins(Path(args[0]).read_text())
    wheels = off_pypi(Path(args[1]).read_text(), source=args[1])
    left_out = removed(Path(args[2]).read_text())
    distributions = _installed_distributions()
    present = sorted(name for name in left_out if _version_of(name) is not None)
    problems = build_ties(locked, wheels) + installed_problems(
        locked, wheels, _version_of, lambda name: metadata.requires(name) or []
    ) + [f"{name} is installed although {args[2]} removes it" for name in present] + unmet_requirements(
        distributions, allowed_missing=left_out)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"image: {len(locked)} locked packages and {len(wheels)} off-PyPI wheels installed as pinned; "
          f"every requirement of the {len(distributions)} installed distributions is met "
          f"(left out on purpose: {', '.join(sorted(left_out)) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
