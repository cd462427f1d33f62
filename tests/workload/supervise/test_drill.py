"""The drill job's checkpoints: exact round trip through the run-directory layout (no Ray)."""

from __future__ import annotations

import numpy as np

from workload.local.rundir import RunDir
from workload.supervise.drill import FEATURES, Shard, digest, load, save


def test_a_checkpoint_round_trips_the_weights_exactly(tmp_path):
    run = RunDir(tmp_path)
    assert load(run)[0] == 0
    weights = np.random.default_rng(0).standard_normal(FEATURES)
    save(run, 10, weights)
    step, loaded = load(run)
    assert step == 10 and run.latest_step() == 10
    assert digest(loaded) == digest(weights)


def test_a_step_depends_only_on_the_step_and_the_weights():
    weights = np.zeros(FEATURES)
    assert np.array_equal(Shard(1).gradient(7, weights), Shard(1).gradient(7, weights))
    assert not np.array_equal(Shard(1).gradient(7, weights), Shard(1).gradient(8, weights))
