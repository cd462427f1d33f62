"""The study (docs/study.md): the split by rotation/reflection class, the plateau rule, the off-path states,
the seed-level statistics and verdict. A whole tiny study on real parts (model, SFT, GRPO, files) runs through
the command in tests/cli/test_study.py."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from workload.local import study
from workload.maze.generator import generate_from_seed
from workload.maze.solver import path_to_actions, shortest_path


def transforms(grid):
    grid = np.asarray(grid, dtype=np.uint8)
    return [form for k in range(4) for form in (np.rot90(grid, k), np.rot90(grid, k).T)]


def test_a_class_is_invariant_under_rotation_and_reflection():
    grid = generate_from_seed(3, 7)["maze_map"]
    assert {study.map_class(form) for form in transforms(grid)} == {study.map_class(grid)}


def test_the_192_maps_fall_into_28_classes_of_the_square_group():
    sizes = collections.Counter(study.map_classes().values())
    assert len(study.map_classes()) == study.MAPS_7X7
    assert sorted(sizes.values()) == [2, 2] + [4] * 5 + [8] * 21
    assert all(study.SQUARE_SYMMETRIES % size == 0 for size in sizes.values())


def test_held_out_and_validation_are_whole_classes_that_training_never_sees():
    from workload.local.data import PHASE_SFT, draw_seeds

    split = study.class_split()
    assert (len(split.heldout.entries), len(split.validation.entries)) == (128, 64)
    assert not split.heldout_classes & split.validation_classes
    held_maps = {np.asarray(e["init_state"]["maze_map"], dtype=np.uint8).tobytes() for e in split.heldout.entries}
    # closed under the square's symmetries: every rotation or mirror image of a held-out map is held out
    assert {np.ascontiguousarray(f).tobytes() for m in held_maps
            for f in transforms(np.frombuffer(m, dtype=np.uint8).reshape(7, 7))} == held_maps
    forbidden = split.heldout_classes | split.validation_classes
    drawn = draw_seeds(300, seed=0, phase=PHASE_SFT, step=0, accept=split.accept)
    assert not {study.seed_class(s) for s in drawn} & forbidden
    assert {study.seed_class(e["seed"]) for e in split.validation.entries} == split.validation_classes


def test_the_plateau_rule_waits_for_a_count_above_zero_then_for_patience_checks_without_a_new_best():
    rule = study.PlateauRule(patience=4)
    counts = [0] * 10 + [3, 5, 5, 4, 5, 5]
    assert [rule.stops(c) for c in counts] == [False] * 15 + [True]
    assert rule.best == 5


def test_off_path_states_are_the_floor_cells_off_the_path_labelled_with_the_solvers_action():
    cfg = study.study_config(0)
    entry = study.class_split().heldout.entries[0]
    state = entry["init_state"]
    grid = np.asarray(state["maze_map"])
    path = shortest_path(grid, state["agent_location"], state["target_location"])
    contexts, labels = study.off_path_states(entry, cfg)
    assert len(contexts) == int((grid == 0).sum()) - len(path) > 0
    off = [tuple(int(v) for v in c) for c in np.argwhere(grid == 0) if tuple(int(v) for v in c) not in set(path)]
    assert labels == [path_to_actions(shortest_path(grid, c, state["target_location"]))[0] for c in off]


@pytest.mark.parametrize(("t", "df", "p"), [(2.5706, 5, 0.05), (2.0150, 5, 0.10), (1.0, 1, 0.5), (0.0, 5, 1.0)])
def test_t_sf_gives_the_two_sided_p_of_students_t(t, df, p):
    # 2.5706 and 2.0150: the 0.975 and 0.95 quantiles of t with 5 df; P(|T| > 1) = 1/2 for 1 df (Cauchy)
    assert study.t_sf(t, df) == pytest.approx(p, abs=2e-5)
    if p < 1:
        assert study.t_quantile(p, df) == pytest.approx(t, abs=1e-3)


@pytest.mark.parametrize(("d", "outcome"), [
    ([10, 12, 9, 11, 10, 13], "RL adds value"),
    ([-10, -12, -9, -11, -10, -13], "SFT continued is better"),
    ([0.5, -0.5, 0.2, -0.2, 0.1, 0.0], "no difference"),
    ([10, -10, 5, -5, 8, -9], "inconclusive"),
    ([1, 1, 1, 1, 1, 1], "no difference"),
])
def test_the_verdict_follows_the_pre_registered_rules(d, outcome):
    result = study.verdict(d, margin=6.4)
    assert result["outcome"] == outcome
    assert result["grpo_wins"] + result["sft_wins"] + result["ties"] == len(d)


def test_the_verdict_needs_two_seeds():
    with pytest.raises(ValueError, match="at least 2 seeds, got 1"):
        study.verdict([3], margin=6.4)
