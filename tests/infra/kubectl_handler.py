"""aws-cdk-lib's own kubectl handler (the Lambda behind KubernetesPatch and KubernetesObjectValue), run here.

The handler's Python ships inside the installed aws-cdk-lib (its jsii tarball,
custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/); this unpacks the version installed and runs
it unchanged, with `aws` and `kubectl` on PATH replaced by scripts that answer as a cluster would
(NotFound a given number of times, then the object) and log each call. Its clock is a fake one that
advances only when the handler sleeps, so a 10-minute deadline costs no time.
"""

from __future__ import annotations

import importlib.util
import stat
import tarfile
from pathlib import Path
from types import ModuleType, SimpleNamespace

HANDLER_DIR = "package/custom-resource-handlers/dist/aws-eks-v2/kubectl-handler"
NOT_FOUND = ('Error from server (NotFound): observabilityconfigs.observability.sagemaker.aws.amazon.com '
             '"{name}" not found')


def _cdk_tarball() -> Path:
    import aws_cdk

    (tarball,) = (Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    return tarball


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class FakeClock:
    """``time.time`` and ``time.sleep`` for the handler: sleeping advances the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def load(kind: str, folder: Path, monkeypatch, *, not_found: int, name: str) -> tuple[ModuleType, Path, FakeClock]:
    """CDK's ``kind`` handler module ("get" or "patch") with a kubectl that answers NotFound ``not_found``
    times (-1: always), then the object ``name``. Returns (module, the kubectl call log, the clock)."""
    source = folder / "handler"
    with tarfile.open(_cdk_tarball()) as archive:
        member = archive.getmember(f"{HANDLER_DIR}/{kind}/__init__.py")
        source.mkdir(parents=True, exist_ok=True)
        (source / f"{kind}.py").write_bytes(archive.extractfile(member).read())
    bin_dir, log, count = folder / "bin", folder / "kubectl.log", folder / "kubectl.count"
    bin_dir.mkdir(exist_ok=True)
    count.write_text("0")
    _executable(bin_dir / "aws", "#!/bin/sh\nexit 0\n")  # `aws eks update-kubeconfig`: nothing to log in to here
    message = NOT_FOUND.format(name=name)
    _executable(bin_dir / "kubectl", f"""#!/bin/sh
echo "$@" >> {log}
n=$(cat {count}); n=$((n + 1)); echo $n > {count}
if [ {not_found} -lt 0 ] || [ $n -le {not_found} ]; then echo '{message}' >&2; exit 1; fi
case "$*" in *" get "*) printf "'%s'" {name} ;; *) echo patched ;; esac
""")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("TEST_OUTDIR", str(folder))
    spec = importlib.util.spec_from_file_location(f"cdk_kubectl_{kind}", source / f"{kind}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    clock = FakeClock()
    module.time = SimpleNamespace(time=clock.time, sleep=clock.sleep)
    return module, log, clock
