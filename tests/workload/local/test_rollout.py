"""Rollout actors on a real local Ray: weight sync, same-maze groups, seeded sampling."""

from __future__ import annotations

import pytest
import torch

from workload.local.config import load_config
from workload.local.episodes import PlaySettings
from workload.local.rollout import local_ray, start_workers
from workload.maze.generator import generate_from_seed

SETTINGS = PlaySettings(size=7, cell_px=8, max_turns=3, history=1, temperature=1.0, max_new_tokens=2)


@pytest.mark.slow
def test_actors_play_groups_of_the_same_maze_and_follow_synced_weights(tiny_model_dir):
    lora = load_config("local").trainer.policy.model.lora
    states = [generate_from_seed(1, 7), generate_from_seed(2, 7)]
    with local_ray(num_cpus=2) as ray:
        (worker,) = start_workers(ray, 1, str(tiny_model_dir), lora, SETTINGS)
        first = ray.get(worker.play_groups.remote(states, [1, 2], 3, 7))
        again = ray.get(worker.play_groups.remote(states, [1, 2], 3, 7))
        # A large random adapter changes the policy: sampling with the same seed now differs.
        from peft import get_peft_model_state_dict

        from workload.local.rollout import attach_lora
        from workload.model.tiny import load_tiny

        model = attach_lora(load_tiny(tiny_model_dir)[0], lora)
        torch.manual_seed(0)
        weights = {k: torch.randn_like(v) for k, v in get_peft_model_state_dict(model).items()}
        assert ray.get(worker.load_lora.remote(ray.put(weights))) == len(weights)
        synced = ray.get(worker.play_groups.remote(states, [1, 2], 3, 7))
    assert [e.seed for e in first] == [1, 1, 1, 2, 2, 2]
    assert all(e.init_state == states[0] for e in first[:3]) and all(
        e.init_state == states[1] for e in first[3:]
    )
    assert [e.completions for e in first] == [e.completions for e in again]
    assert [e.completions for e in first] != [e.completions for e in synced]
