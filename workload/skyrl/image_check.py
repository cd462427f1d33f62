"""The trainer image's dependency files, and the build-time check that the image holds them.

``containers/trainer/requirements.lock`` is the resolver's lock of the PyPI packages (with
sha256 hashes); ``containers/trainer/off-pypi.txt`` pins the wheels PyPI does not carry, each by
the exact URL and sha256 SkyRL's own uv configuration installs (``name @ URL --hash=sha256:...``,
a pip requirements file); ``containers/trainer/removed.txt`` names the packages left out on
purpose; ``containers/trainer/overridden.txt`` the requirements of an off-PyPI wheel the image
leaves unmet on purpose, each one SkyRL's own ``override-dependencies`` also overrides.
``containers/lock.py`` writes and re-checks the lock; the Dockerfile runs ``python -m
workload.skyrl.image_check LOCK OFF_PYPI REMOVED OVERRIDDEN`` after installing both, so an image
whose packages disagree with either file, or in which any installed distribution (the base
image's included) has a requirement that is not met (``pip check``'s rule; only the removed
packages may be missing, only the overridden requirements unmet), fails its build instead of
its first job.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s\\;]+)")
# A wheel named by URL and hash: ``name @ https://.../file.whl --hash=sha256:<64 hex>``.
_URL_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*) @ (https://\S+\.whl) --hash=sha256:([0-9a-f]{64})$")
# A local version carrying the (CUDA, torch) build, as SkyRL's and Astral's GPU wheels do:
# 2.8.3+cu.13.0.torch.2.13[.fa4b28.skyrl1].
LOCAL_BUILD = re.compile(r"\+cu\.(\d+)\.(\d+)\.torch\.(\d+)\.(\d+)(?:\.|$)")
# SkyRL's wheel releases name the build in the release tag: .../releases/download/cu13torch2.13/...
RELEASE_BUILD = re.compile(r"/releases/download/cu(\d+)torch(\d+)\.(\d+)[-/]")
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


def wheel_version(url: str) -> tuple[str, str]:
    """(normalized distribution, version) from a wheel URL's file name (PEP 427), ``%2B`` decoded."""
    from urllib.parse import unquote

    parts = unquote(url.rsplit("/", 1)[-1]).removesuffix(".whl").split("-")
    if len(parts) not in (5, 6):
        raise ValueError(f"{url} does not end in a wheel file name (name-version-python-abi-platform.whl)")
    return normalize(parts[0]), parts[1]


def off_pypi_wheels(text: str, *, source: str = "off-pypi.txt") -> list[tuple[str, str, str, str]]:
    """``(name, version, URL, sha256)`` of each line; raises ``ValueError`` naming a malformed line.

    The version is read from the wheel's own file name at that URL, never written beside it, so it
    cannot drift from the file the hash pins."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _URL_PIN.match(line.strip())
        if not match:
            raise ValueError(
                f"{source}:{number}: {line!r} is not '<name> @ <https wheel URL> --hash=sha256:<64 hex>'. "
                "Fix: pin each wheel by the exact URL and sha256 its publisher's lock names."
            )
        name, url, digest = normalize(match.group(1)), match.group(2), match.group(3)
        file_name, version = wheel_version(url)
        if file_name != name:
            raise ValueError(f"{source}:{number}: the URL holds {file_name}, not {name}. Fix: name the wheel's own "
                             "distribution before the @.")
        rows.append((name, version, url, digest))
    return rows


def off_pypi(text: str, *, source: str = "off-pypi.txt") -> list[tuple[str, str, str]]:
    """``(name, version, URL)`` of each off-PyPI wheel (``off_pypi_wheels`` without the hash)."""
    return [(name, version, url) for name, version, url, _sha in off_pypi_wheels(text, source=source)]


def overridden(text: str) -> set[tuple[str, str]]:
    """``{(package, requirement name)}`` of ``overridden.txt`` lines ``<package> <requirement>  # why``."""
    pairs = set()
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) == 2:
            pairs.add((normalize(words[0]), normalize(words[1])))
        elif words:
            raise ValueError(f"overridden.txt: {line!r} is not '<package> <requirement name>'")
    return pairs


def removed(text: str) -> set[str]:
    """The normalized names of ``removed.txt`` (one a line, ``#`` comments)."""
    return {normalize(line.strip()) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")}


def unmet_requirements(
    distributions: list[tuple[str, str, list[str]]],
    *,
    allowed_missing: set[str],
    environment: dict[str, str] | None = None,
    accepted: set[tuple[str, str]] = frozenset(),
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
            if (normalize(name), wanted) in accepted:
                continue
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
    """Off-PyPI wheels built for another torch or CUDA than the lock's (one line each).

    The build is read from the wheel's local version (``+cu.13.0.torch.2.13``), else from the release
    tag of SkyRL's wheel releases (``cu13torch2.13``), else from FlashInfer's ``+cu130``."""
    torch_minor = tuple(int(p) for p in locked["torch"].split("+")[0].split(".")[:2])
    cuda = cuda_of_lock(locked)
    problems = []
    for name, version, url in wheels:
        local = LOCAL_BUILD.search(version)
        release = RELEASE_BUILD.search(url)
        flashinfer = CUDA_LOCAL.search(version)
        if local:
            built_cuda = (int(local.group(1)), int(local.group(2)))
            built_torch = (int(local.group(3)), int(local.group(4)))
            if built_torch != torch_minor or built_cuda != cuda:
                problems.append(
                    f"{name}=={version}: built for torch {built_torch[0]}.{built_torch[1]} / CUDA "
                    f"{built_cuda[0]}.{built_cuda[1]}, the lock installs torch {locked['torch']} on CUDA "
                    f"{cuda[0]}.{cuda[1]}. Fix: pin the build of torch {torch_minor[0]}.{torch_minor[1]} / CUDA "
                    f"{cuda[0]}.{cuda[1]} that the publisher's lock names."
                )
        elif release:
            built_torch = (int(release.group(2)), int(release.group(3)))
            if built_torch != torch_minor or int(release.group(1)) != cuda[0]:
                problems.append(
                    f"{name}=={version}: release {release.group(0).split('/')[-2]} is built for torch "
                    f"{built_torch[0]}.{built_torch[1]} / CUDA {release.group(1)}, the lock installs torch "
                    f"{locked['torch']} on CUDA {cuda[0]}.{cuda[1]}. Fix: pin the release built for the lock's torch."
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
    accepted: set[tuple[str, str]] = frozenset(),
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
            if (name, normalize(requirement.name)) in accepted:
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
    """``python -m workload.skyrl.image_check LOCK OFF_PYPI REMOVED OVERRIDDEN``: exit 1 listing every mismatch."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m workload.skyrl.image_check requirements.lock off-pypi.txt removed.txt overridden.txt",
              file=sys.stderr)
        return 2
    locked = pins(Path(args[0]).read_text())
    wheels = off_pypi(Path(args[1]).read_text(), source=args[1])
    left_out = removed(Path(args[2]).read_text())
    accepted = overridden(Path(args[3]).read_text())
    distributions = _installed_distributions()
    present = sorted(name for name in left_out if _version_of(name) is not None)
    problems = build_ties(locked, wheels) + installed_problems(
        locked, wheels, _version_of, lambda name: (metadata.requires(name) or []) if _version_of(name) else [], accepted
    ) + [f"{name} is installed although {args[2]} removes it" for name in present] + unmet_requirements(
        distributions, allowed_missing=left_out, accepted=accepted)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"image: {len(locked)} locked packages and {len(wheels)} off-PyPI wheels installed as pinned; "
          f"every requirement of the {len(distributions)} installed distributions is met "
          f"(left out on purpose: {', '.join(sorted(left_out)) or 'none'}; "
          f"overridden: {', '.join(f'{a}->{b}' for a, b in sorted(accepted)) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
