"""Where `skymaze` finds Ray's auth token, and what it sends (the real head: tests/infra/test_ray_auth.py)."""

from __future__ import annotations

import base64
import json

import pytest

from workload.skyrl.ray_auth import RayToken, SecretRef, find_token, token_from_secret_json

SECRET = json.dumps({"kind": "Secret", "data": {"auth_token": base64.b64encode(b"from-secret").decode()}})


class Reader:
    """Records which Secret was asked for; answers with ``answer``."""

    def __init__(self, answer=(SECRET, "")):
        self.asked: list[SecretRef] = []
        self.answer = answer

    def __call__(self, ref: SecretRef):
        self.asked.append(ref)
        return self.answer


def test_the_environment_wins_and_no_secret_is_read():
    reader = Reader()
    token, _ = find_token("http://127.0.0.1:8265", {"RAY_AUTH_TOKEN": " t1 \n"}, read_secret=reader)
    assert (token.value, token.source, reader.asked) == ("t1", "RAY_AUTH_TOKEN", [])


def test_a_token_file_comes_next(tmp_path):
    (tmp_path / "token").write_text("t2\n")
    token, _ = find_token("http://127.0.0.1:8265", {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "token")}, read_secret=Reader())
    assert token.value == "t2" and "RAY_AUTH_TOKEN_PATH" in token.source
    missing, why = find_token("http://127.0.0.1:8265", {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "nope")})
    assert missing is None and "cannot be read" in why


def test_a_port_forward_reads_the_trainers_secret():
    reader = Reader()
    token, _ = find_token("http://localhost:8265", {}, read_secret=reader)
    assert token.value == "from-secret" and reader.asked == [SecretRef("ray", "skymaze-train")]
    assert token.source == "Secret ray/skymaze-train (kubectl)"


def test_an_endpoint_address_reads_the_secret_of_the_cluster_it_names():
    reader = Reader()
    token, _ = find_token("sagemaker_ray://other-train/team", {}, read_secret=reader)
    assert reader.asked == [SecretRef("team", "other-train")]
    assert token.headers("sagemaker_ray://other-train/team") == {"X-Ray-Authorization": "Bearer from-secret"}
    assert token.headers("http://127.0.0.1:8265") == {"Authorization": "Bearer from-secret"}


def test_a_remote_dashboard_is_not_sent_a_secret_read_from_the_kubeconfig():
    reader = Reader()
    token, why = find_token("http://10.0.0.5:8265", {}, read_secret=reader)
    assert (token, reader.asked) == (None, []) and "RAY_AUTH_TOKEN is not set" in why


def test_an_unreadable_secret_says_why():
    token, why = find_token("http://127.0.0.1:8265", {}, read_secret=Reader((None, "kubectl is not installed")))
    assert token is None and why == "RAY_AUTH_TOKEN is not set and kubectl is not installed"


def test_the_token_never_shows_in_a_repr():
    assert "s3cr3t" not in repr(RayToken("s3cr3t", "RAY_AUTH_TOKEN"))


@pytest.mark.parametrize("text", ["{}", '{"data": {"auth_token": "***"}}', "not json", '{"data": []}'])
def test_a_secret_without_a_token_is_refused(text):
    with pytest.raises(ValueError, match=r"not a Secret with data\.auth_token"):
        token_from_secret_json(text)
