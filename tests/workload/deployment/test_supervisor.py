"""The supervisor's limits on the command line: `skymaze supervise --set KEY=VALUE`, one model, one grammar."""

from __future__ import annotations

import pytest

from workload.config import ConfigError
from workload.deployment.supervisor import SupervisorLimits, group_args, limit_args, limits_from_sets


def test_set_pairs_give_the_limits_and_the_defaults_for_the_rest():
    limits = limits_from_sets(["max_submissions=4", "release_workers=false", "group_idle_s=1800"])
    assert limits == SupervisorLimits(max_submissions=4, release_workers=False, group_idle_s=1800)
    assert limits_from_sets([]) == SupervisorLimits()


def test_a_misspelt_limit_gets_the_closest_one():
    with pytest.raises(ConfigError, match=r"unknown setting 'max_submisions'; did you mean max_submissions\? "
                                          r"\(`skymaze supervise --help` lists them\)"):
        limits_from_sets(["max_submisions=3"])


def test_a_pair_without_a_value_shows_the_grammar():
    with pytest.raises(ConfigError, match=r"--set 'max_submissions': expected KEY=VALUE, e.g. --set max_submissions=4"):
        limits_from_sets(["max_submissions"])


def test_a_limit_out_of_range_names_the_key_and_the_rule():
    with pytest.raises(ConfigError, match=r"supervisor limits: max_submissions=0: Input should be greater than or equal to 1"):
        limits_from_sets(["max_submissions=0"])


def test_a_negative_idle_count_is_refused():
    with pytest.raises(ConfigError, match=r"group_idle_count=-1: Input should be greater than or equal to 0"):
        limits_from_sets(["group_idle_count=-1"])


def test_a_flag_that_is_not_a_boolean_is_refused():
    with pytest.raises(ConfigError, match=r"release_workers=maybe: Input should be a valid boolean"):
        limits_from_sets(["release_workers=maybe"])


@pytest.mark.parametrize("limits", [
    SupervisorLimits(),
    SupervisorLimits(max_submissions=2, max_failures_at_same_step=5, node_wait_timeout_s=600.5, release_workers=False,
                     group_idle_s=0, group_idle_count=1),
])
def test_the_rendered_pairs_read_back_into_the_same_limits(limits):
    args = [*limit_args(limits), *group_args(limits, "hp")] if limits.group_idle_s is not None else limit_args(limits)
    sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    assert limits_from_sets(sets) == limits
