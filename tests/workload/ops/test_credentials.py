"""How long the deploying credentials last, read from what botocore resolves: real config files, no AWS call."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from workload.ops.credentials import CredentialsError, Lifetime, check_lifetime, credentials_lifetime
from workload.ops.deploy import DEPLOY_MAX_S

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SSO_CONFIG = """[profile dev]
sso_session = corp
sso_account_id = 123456789012
sso_role_name = Admin
region = us-west-2
[sso-session corp]
sso_start_url = https://corp.awsapps.com/start
sso_region = us-east-1
"""


@pytest.fixture
def aws_files(tmp_path, monkeypatch):
    """An AWS config of the test's own: no credentials in the environment, config and cache under tmp_path."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CREDENTIAL_EXPIRATION",
                "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    (tmp_path / "config").write_text(SSO_CONFIG)
    (tmp_path / "sso").mkdir()
    return tmp_path


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_keys_without_a_session_token_never_expire(aws_files, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    lifetime = credentials_lifetime(boto3.Session())
    assert lifetime == Lifetime("long-lived", "env")
    assert check_lifetime(lifetime, needed_s=DEPLOY_MAX_S, now=NOW) is None


def test_pasted_session_credentials_that_end_before_the_deploy_are_refused(aws_files, monkeypatch):
    """AWS_CREDENTIAL_EXPIRATION (botocore reads it) 50 min away, a deploy of up to 3 h 15 min: refused up front."""
    expiry = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=50)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    monkeypatch.setenv("AWS_CREDENTIAL_EXPIRATION", _stamp(expiry))
    lifetime = credentials_lifetime(boto3.Session())
    assert (lifetime.kind, lifetime.method, lifetime.expires_at) == ("expires", "env", expiry)
    now = expiry - timedelta(minutes=50)
    with pytest.raises(CredentialsError, match=r"the AWS credentials \(env\) expire in 50 min, at .* UTC; a deploy "
                                               r"takes up to 3\.2 h.*aws sso login.*Nothing was deployed"):
        check_lifetime(lifetime, needed_s=DEPLOY_MAX_S, now=now)
    assert check_lifetime(lifetime, needed_s=DEPLOY_MAX_S, now=expiry - timedelta(hours=4)) is None


def test_session_credentials_of_unknown_expiry_are_a_warning_that_says_how_to_deploy(aws_files, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    lifetime = credentials_lifetime(boto3.Session())
    assert lifetime == Lifetime("unknown", "env")
    warning = check_lifetime(lifetime, needed_s=DEPLOY_MAX_S, now=NOW)
    assert warning.startswith("warning: the AWS credentials (env) are temporary and their expiry is unknown")
    assert "assume-role profile" in warning


def test_an_sso_sign_in_that_ends_mid_deploy_is_refused_and_a_renewable_one_passes(aws_files):
    """The cached token of `aws sso login` (botocore's SSO token cache, keyed by the session name's SHA-1)."""
    cache = aws_files / "sso"
    token = cache / f"{hashlib.sha1(b'corp').hexdigest()}.json"
    token.write_text(json.dumps({"accessToken": "t", "expiresAt": _stamp(NOW + timedelta(hours=1))}))
    lifetime = credentials_lifetime(boto3.Session(profile_name="dev"), sso_cache_dir=cache)
    assert (lifetime.kind, lifetime.method, lifetime.expires_at) == ("expires", "sso", NOW + timedelta(hours=1))
    with pytest.raises(CredentialsError, match=r"the IAM Identity Center sign-in \(sso\) expire in 60 min"):
        check_lifetime(lifetime, needed_s=DEPLOY_MAX_S, now=NOW)
    # With a refresh token botocore renews the access token until the Identity Center session ends.
    token.write_text(json.dumps({"accessToken": "t", "expiresAt": _stamp(NOW + timedelta(hours=1)),
                                 "refreshToken": "r"}))
    renewed = credentials_lifetime(boto3.Session(profile_name="dev"), sso_cache_dir=cache)
    assert renewed == Lifetime("renewed", "sso")
    assert check_lifetime(renewed, needed_s=DEPLOY_MAX_S, now=NOW) is None


def test_an_assume_role_profile_is_renewed_by_botocore(aws_files):
    (aws_files / "config").write_text("[profile base]\nregion = us-west-2\n[profile deployer]\n"
                                      "role_arn = arn:aws:iam::123456789012:role/deployer\nsource_profile = base\n")
    (aws_files / "credentials").write_text("[base]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = s\n")
    assert credentials_lifetime(boto3.Session(profile_name="deployer")) == Lifetime("renewed", "assume-role")
