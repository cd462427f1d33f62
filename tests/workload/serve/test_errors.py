"""Model ids ``BASE`` / ``BASE:ADAPTER`` and adapter-name safety."""

from __future__ import annotations

import pytest

from workload.serve.errors import ApiError, parse_model_id, validate_adapter_name


def test_base_and_adapter_ids():
    assert parse_model_id("tiny", base_model_id="tiny") is None
    assert parse_model_id("tiny:step-20_v1.2", base_model_id="tiny") == "step-20_v1.2"


def test_another_base_is_404():
    with pytest.raises(ApiError, match="serves the base model 'tiny'") as caught:
        parse_model_id("qwen:a0", base_model_id="tiny")
    assert caught.value.status == 404


@pytest.mark.parametrize("name", ["", ".", "..", "../etc", "a/b", "a\\b", "a b", "é", "x" * 129, "a:b"])
def test_unsafe_adapter_names_are_400(name):
    with pytest.raises(ApiError, match="is invalid") as caught:
        parse_model_id(f"tiny:{name}", base_model_id="tiny")
    assert caught.value.status == 400


def test_validate_adapter_name_says_how_to_fix():
    with pytest.raises(ValueError, match=r"use 1-128 characters from \[A-Za-z0-9._-\]"):
        validate_adapter_name("../x")
