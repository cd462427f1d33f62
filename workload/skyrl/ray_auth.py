"""Ray's auth token for the Jobs API calls of `skymaze submit|status|logs|stop|jobs|supervise`.

Every Ray the stacks deploy asks for a token (KubeRay `authOptions.mode: token`; the token lives in the
Secret KubeRay creates, named after the RayCluster, data key `auth_token`). A caller finds it, first
found wins:

1. ``RAY_AUTH_TOKEN`` (Ray's own variable; the supervisor's pod gets it from the Secret),
2. ``RAY_AUTH_TOKEN_PATH``, a file holding it (Ray's own variable),
3. for a port-forward (an ``http://`` address on this machine) the trainer's Secret, for a
   ``sagemaker_ray://CLUSTER/NAMESPACE`` address that RayCluster's, read with
   ``kubectl get --raw /api/v1/namespaces/NAMESPACE/secrets/NAME`` and the caller's kubeconfig (as
   ``aws eks update-kubeconfig`` wrote it; the EKS access entry's cluster admin or Ray-namespace edit
   policy may read Secrets there),

and sends it as ``Authorization: Bearer`` on every request (Ray 2.57 and 2.60 check that header:
ray/_private/authentication/http_token_authentication.py). The token is never printed; only where
it came from is. Without one, a Ray that asks for it answers 401, and :func:`refusal_hint` says what
to do.
"""

from __future__ import annotations

import base64
import binascii
import json
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from workload.deployment.names import RAY_AUTH_SECRET_KEY, RAY_NAMESPACE, TRAINER_RAYCLUSTER

TOKEN_ENV = "RAY_AUTH_TOKEN"  # ray/_private/authentication: read by Ray's own clients too
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
SECRET_KEY = RAY_AUTH_SECRET_KEY
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})  # where `kubectl port-forward` listens
KUBECTL_TIMEOUT_S = 20
SAGEMAKER_SCHEME = "sagemaker_ray"  # sagemaker_ray://CLUSTER/NAMESPACE (toolkit-for-ray-on-sagemaker-ai)
PROXY_HEADER = "X-Ray-Authorization"  # ray/_private/authentication/authentication_constants.py


@dataclass(frozen=True)
class RayToken:
    """A token and where it came from (the value never shows in a repr or a log line)."""

    value: str = field(repr=False)
    source: str

    def headers(self, address: str = "") -> dict[str, str]:
        """The header Ray checks: ``Authorization``, or through the HyperPod Ray endpoint (whose proxy
        authenticates the caller by its own session cookie) Ray's proxy header ``X-Ray-Authorization``
        (Ray 2.57 and 2.60 read it when no Authorization header came: http_token_authentication.py)."""
        name = PROXY_HEADER if address.startswith(f"{SAGEMAKER_SCHEME}://") else "Authorization"
        return {name: f"Bearer {self.value}"}


@dataclass(frozen=True)
class SecretRef:
    namespace: str = RAY_NAMESPACE
    name: str = TRAINER_RAYCLUSTER

    def api_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.name}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def token_from_secret_json(text: str) -> str:
    """The token in a Kubernetes Secret object (JSON, as the API server returns it): base64 ``data.auth_token``."""
    try:
        encoded = json.loads(text)["data"][SECRET_KEY]
        return base64.b64decode(encoded, validate=True).decode().strip()
    except (ValueError, KeyError, TypeError, binascii.Error) as err:
        raise ValueError(f"not a Secret with data.{SECRET_KEY}: {type(err).__name__}") from None


def _kubectl_secret(ref: SecretRef) -> tuple[str | None, str]:
    """(Secret JSON, "") or (None, why not) from the caller's kubeconfig."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None, "kubectl is not installed"
    try:
        # --raw: the Secret object as the API server returns it, without kubectl's discovery round trips
        done = subprocess.run([kubectl, "get", "--raw", ref.api_path(), f"--request-timeout={KUBECTL_TIMEOUT_S}s"],
                              capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S + 5, check=False)
    except subprocess.TimeoutExpired:
        return None, f"kubectl did not answer within {KUBECTL_TIMEOUT_S} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return None, f"kubectl could not read Secret {ref}: {last[:300]}"
    return done.stdout, ""


def is_port_forward(address: str) -> bool:
    """An http(s) address on this machine: a local head or a port-forward."""
    parsed = urlparse(address)
    return parsed.scheme in {"http", "https"} and (parsed.hostname or "") in LOCAL_HOSTS


def endpoint_secret(address: str) -> SecretRef | None:
    """The auth Secret of the RayCluster a ``sagemaker_ray://CLUSTER/NAMESPACE`` address names (the toolkit
    reads the same kubeconfig); None for other addresses."""
    prefix = f"{SAGEMAKER_SCHEME}://"
    if not address.startswith(prefix):
        return None
    cluster, _, namespace = address[len(prefix):].strip("/").partition("/")
    return SecretRef(namespace or RAY_NAMESPACE, cluster) if cluster and "/" not in namespace else None


def find_token(address: str, environ: Mapping[str, str], *, secret: SecretRef = SecretRef(),
               read_secret: Callable[[SecretRef], tuple[str | None, str]] = _kubectl_secret,
               ) -> tuple[RayToken | None, str]:
    """(token, "") or (None, why none was found), in the order of the module's docstring."""
    if environ.get(TOKEN_ENV, "").strip():
        return RayToken(environ[TOKEN_ENV].strip(), TOKEN_ENV), ""
    if environ.get(TOKEN_PATH_ENV, "").strip():
        path = Path(environ[TOKEN_PATH_ENV]).expanduser()
        try:
            return RayToken(path.read_text().strip(), f"{TOKEN_PATH_ENV} ({path})"), ""
        except OSError as err:
            return None, f"{TOKEN_PATH_ENV}={path} cannot be read: {err.strerror}"
    via_endpoint = endpoint_secret(address)
    if via_endpoint is not None:
        secret = via_endpoint
    elif not is_port_forward(address):
        return None, f"{TOKEN_ENV} is not set"
    text, why = read_secret(secret)
    if text is None:
        return None, f"{TOKEN_ENV} is not set and {why}"
    try:
        return RayToken(token_from_secret_json(text), f"Secret {secret} (kubectl)"), ""
    except ValueError as err:
        return None, f"Secret {secret}: {err}"


def refusal_hint(secret: SecretRef = SecretRef()) -> str:
    """What to do when Ray answers 401/403 (the token is missing or wrong)."""
    return (f"the Ray cluster asks for its auth token. Fix: let kubectl read Secret {secret} "
            f"(aws eks update-kubeconfig ...), or export {TOKEN_ENV}=\"$(kubectl -n {secret.namespace} get secret "
            f"{secret.name} -o jsonpath='{{.data.{SECRET_KEY}}}' | base64 -d)\"")
