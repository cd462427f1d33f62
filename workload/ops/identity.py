"""Who and where an AWS command acts: one STS GetCallerIdentity, first, before anything else.

Every command that changes or reads a deployment (deploy, teardown, diff, cluster status) calls
:func:`check_identity` once and prints :meth:`Identity.line`, so the account, region and
principal are on screen before any synth or deletion, and missing or expired credentials end
in one sentence instead of a botocore traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from workload.errors import SkymazeError

CREDENTIALS_HELP = ("configure credentials (aws configure, aws sso login, or AWS_PROFILE=NAME) and check them "
                    "with `aws sts get-caller-identity`")


class IdentityError(SkymazeError):
    """The caller's AWS identity cannot be read or does not fit the settings; the message says what to do."""


@dataclass(frozen=True)
class Identity:
    account: str
    arn: str
    region: str

    def line(self) -> str:
        """The one line every AWS command prints first."""
        return f"AWS account {self.account}, region {self.region}, as {self.arn}"


def check_identity(session, region: str, *, expected_account: str | None = None) -> Identity:
    """STS GetCallerIdentity with ``session`` in ``region``; ``IdentityError`` with one sentence on failure.

    ``expected_account`` (a ``-c account=...`` the user pinned) must match the credentials' account:
    deploying one account's settings with another account's credentials is refused before any call
    that changes something.
    """
    try:
        caller = session.client("sts", region_name=region).get_caller_identity()
    except NoCredentialsError:
        raise IdentityError(f"no AWS credentials found; {CREDENTIALS_HELP}") from None
    except NoRegionError:
        raise IdentityError("no AWS region set; pass -c region=REGION") from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise IdentityError(f"AWS refused the credentials ({error.get('Code', 'error')}: "
                            f"{error.get('Message', exc)}); {CREDENTIALS_HELP}") from None
    except BotoCoreError as exc:
        raise IdentityError(f"cannot reach AWS STS in {region}: {exc}") from None
    identity = Identity(account=caller["Account"], arn=caller["Arn"], region=region)
    if expected_account and expected_account != identity.account:
        raise IdentityError(f"-c account={expected_account} but the credentials belong to account "
                            f"{identity.account} ({identity.arn}); use that account's credentials or drop -c account")
    return identity
