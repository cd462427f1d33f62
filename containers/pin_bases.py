"""Pin the images' base images by digest, or report which are not.

    python containers/pin_bases.py serve      # resolve serve's base tag with Docker and write tag@sha256:...
    python containers/pin_bases.py --check    # list every Dockerfile whose base has no digest (exit 1 if any)

Each Dockerfile names its base in one `ARG <NAME>_BASE=<image>` default followed by `FROM ${<NAME>_BASE}`.
A tag can be moved to other content; `<image>:<tag>@sha256:<digest>` cannot, and Docker checks the
digest on pull. Resolving needs the registry (``docker buildx imagetools inspect``), so it runs where
the images are built (`make pin-bases`), not in the tests.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

CONTAINERS = Path(__file__).resolve().parent
BASE_ARG = re.compile(r"^ARG (?P<name>[A-Z0-9_]+_BASE)=(?P<ref>\S+)$", re.M)
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def base_reference(dockerfile_text: str) -> tuple[str, str]:
    """(ARG name, image reference) of the Dockerfile's base."""
    found = BASE_ARG.findall(dockerfile_text)
    if len(found) != 1:
        raise ValueError(f"expected one `ARG <NAME>_BASE=<image>` line, found {len(found)}")
    return found[0]


def is_pinned(reference: str) -> bool:
    return bool(DIGEST.search(reference))


def with_digest(dockerfile_text: str, digest: str) -> str:
    """The Dockerfile with its base reference pinned to `digest` (sha256:...), the tag kept for readers."""
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"{digest!r} is not a sha256 digest")
    name, reference = base_reference(dockerfile_text)
    tagged = DIGEST.sub("", reference)
    return BASE_ARG.sub(lambda m: f"ARG {name}={tagged}@{digest}", dockerfile_text, count=1)


def resolve(reference: str) -> str:
    """The registry's digest of `reference` (its multi-platform index), through Docker."""
    done = subprocess.run(["docker", "buildx", "imagetools", "inspect", DIGEST.sub("", reference),
                           "--format", "{{.Manifest.Digest}}"], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"cannot resolve {reference}: {done.stderr.strip()} (needs Docker with buildx and the registry)")
    return done.stdout.strip()


def unpinned(containers: Path = CONTAINERS) -> dict[str, str]:
    """Image folder -> base reference, for every Dockerfile whose base has no digest."""
    bases = {path.parent.name: base_reference(path.read_text())[1] for path in sorted(containers.glob("*/Dockerfile"))}
    return {image: reference for image, reference in bases.items() if not is_pinned(reference)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*", help="image folders under containers/ to pin (e.g. serve)")
    parser.add_argument("--check", action="store_true", help="only list the bases without a digest")
    args = parser.parse_args(argv)
    if args.check:
        missing = unpinned()
        for image, reference in missing.items():
            print(f"{image}: {reference} has no digest; pin it: python containers/pin_bases.py {image}")
        return 1 if missing else 0
    for image in args.images:
        path = CONTAINERS / image / "Dockerfile"
        text = path.read_text()
        digest = resolve(base_reference(text)[1])
        path.write_text(with_digest(text, digest))
        print(f"{image}: {base_reference(path.read_text())[1]}")
    print("Next: make test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
