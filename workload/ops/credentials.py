"""How long the deploying credentials last, asked before a deploy that outlives one-hour sessions.

`cdk deploy --all` runs for hours (``DEPLOY_MAX_S`` in workload/ops/deploy.py); credentials that
expire halfway leave the later stacks unstarted and the deployment unrecorded. What botocore
resolved tells how long they last:

- keys without a session token (an IAM user's) do not expire;
- credentials botocore renews by itself (and the CDK CLI, which resolves the same profile, too):
  an assume-role profile, instance or container roles, web identity, ``credential_process``,
  ``aws login``; an IAM Identity Center (SSO) profile renews only while its sign-in token lasts,
  whose expiry is in the SSO token cache (``aws sso login`` writes it; a token with a refresh token
  renews until the Identity Center session duration ends, which no local file records);
- session credentials pasted into the environment or the credentials file renew never: their
  expiry is known only when ``AWS_CREDENTIAL_EXPIRATION`` gives it (botocore reads it), else unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from workload.errors import SkymazeError

# botocore's credential provider METHOD names (botocore/credentials.py) of credentials it renews by itself.
RENEWED_METHODS = frozenset({"assume-role", "assume-role-with-web-identity", "iam-role", "container-role",
                             "custom-process", "login"})
SSO_METHOD = "sso"
SSO_CACHE_DIR = Path("~/.aws/sso/cache")  # where `aws sso login` caches its token (botocore SSOTokenProvider)
HOW_TO_LAST = ("deploy with credentials that renew themselves: an IAM Identity Center profile after "
               "`aws sso login` (AWS_PROFILE=NAME; its sign-in lasts the session duration the Identity Center "
               "admin set, 8 h by default), or an assume-role profile (role_arn + source_profile) whose source "
               "keys do not expire; docs/deploy.md \"Credentials for a long deploy\"")

Kind = Literal["long-lived", "renewed", "expires", "unknown"]


class CredentialsError(SkymazeError):
    """The deploying credentials end before the deploy would."""


@dataclass(frozen=True)
class Lifetime:
    """How long the resolved credentials last: ``expires_at`` for ``expires`` (and an SSO sign-in)."""

    kind: Kind
    method: str
    expires_at: datetime | None = None

    def left_s(self, now: datetime) -> float | None:
        return None if self.expires_at is None else (self.expires_at - now).total_seconds()


def _sso_token_expiry(session, cache_dir: Path) -> datetime | None:
    """When the SSO profile's cached sign-in token expires; None when no token is cached, or when the token
    carries a refresh token (an ``sso-session`` profile: botocore renews the access token until the Identity
    Center session ends, a date the cache does not hold)."""
    from botocore.exceptions import SSOTokenLoadError
    from botocore.utils import JSONFileCache, SSOTokenLoader, parse_timestamp

    config = session._session.get_scoped_config()  # the profile's own keys (boto3 exposes no public view)
    session_name = config.get("sso_session")
    start_url = config.get("sso_start_url")
    if session_name is None and start_url is None:
        return None
    loader = SSOTokenLoader(cache=JSONFileCache(str(cache_dir.expanduser())))
    try:
        token = loader(start_url, session_name=session_name)
    except SSOTokenLoadError:
        return None
    if token.get("refreshToken"):
        return None
    return parse_timestamp(token["expiresAt"]).astimezone(UTC)


def credentials_lifetime(session, *, sso_cache_dir: Path = SSO_CACHE_DIR) -> Lifetime:
    """What the boto3 ``session`` resolves to, and until when it lasts; reads no secret and calls no AWS API."""
    credentials = session.get_credentials()
    if credentials is None:
        return Lifetime("unknown", "none")
    method = getattr(credentials, "method", "unknown")
    if method == SSO_METHOD:
        expiry = _sso_token_expiry(session, sso_cache_dir)
        return Lifetime("expires", method, expiry) if expiry else Lifetime("renewed", method)
    if method in RENEWED_METHODS:
        return Lifetime("renewed", method)
    # RefreshableCredentials keep their expiry in `_expiry_time` (botocore/credentials.py); the environment
    # provider builds one when AWS_CREDENTIAL_EXPIRATION is set, and "renews" by rereading the same values.
    expiry = getattr(credentials, "_expiry_time", None)
    if expiry is not None:
        return Lifetime("expires", method, expiry.astimezone(UTC))
    frozen = credentials.get_frozen_credentials()
    return Lifetime("unknown" if frozen.token else "long-lived", method)


def check_lifetime(lifetime: Lifetime, *, needed_s: float, now: datetime) -> str | None:
    """None when the credentials outlast ``needed_s``; a warning when nobody can tell; raises when they do not."""
    if lifetime.kind in ("long-lived", "renewed"):
        return None
    hours = needed_s / 3600
    if lifetime.kind == "unknown":
        return (f"warning: the AWS credentials ({lifetime.method}) are temporary and their expiry is unknown; a deploy "
                f"takes up to {hours:.1f} h and stops where they expire: {HOW_TO_LAST}")
    left_s = lifetime.left_s(now) or 0.0
    if left_s < needed_s:
        what = "the IAM Identity Center sign-in" if lifetime.method == SSO_METHOD else "the AWS credentials"
        raise CredentialsError(
            f"{what} ({lifetime.method}) expire in {max(left_s, 0) / 60:.0f} min, at "
            f"{lifetime.expires_at:%Y-%m-%d %H:%M} UTC; a deploy takes up to {hours:.1f} h, and the stacks after "
            f"that point would never start: {HOW_TO_LAST}. Nothing was deployed")
    return None
