"""``MazeEnv``: the maze conversation as a skyrl-gym 0.4 ``BaseTextEnv`` (the SkyRL plugin's env class).

The episode itself (prompts, feedback, action extraction, strict reward, the extras and
settings it reads) is ``workload.maze.conversation.MazeConversation``; this module adds
skyrl-gym's base class and the registration. SkyRL puts ``generator.max_turns`` into each
episode's ``extras``.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv

from workload.maze.conversation import MazeConversation
from workload.skyrl.metrics import EPISODES_KEY, SUM_SUFFIX, require_summable

ENV_ID = "maze"
ENTRY_POINT = "workload.skyrl.env:MazeEnv"


class MazeEnv(MazeConversation, BaseTextEnv):
    """One maze episode for SkyRL: ``MazeConversation``'s game behind skyrl-gym's env interface."""

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
        """Counts over a batch of episodes: ``episodes`` and ``<metric>_sum`` for each numeric metric.

        SkyRL sums these over eval batches (see :mod:`workload.skyrl.metrics`), so
        ``solved_sum / episodes`` is the exact strict rate however the eval set is batched.
        """
        sums: dict[str, float] = {}
        for episode in metrics:
            for key, value in episode.items():
                if isinstance(value, int | float) and not isinstance(value, bool | str):
                    sums[key + SUM_SUFFIX] = sums.get(key + SUM_SUFFIX, 0.0) + float(value)
        out = {EPISODES_KEY: float(len(metrics)), **sums}
        require_summable(tuple(out))
        return out


def register_maze_env(env_id: str = ENV_ID) -> str:
    """Register ``MazeEnv`` with skyrl-gym under ``env_id`` (idempotent); returns the id."""
    import skyrl_gym
    from skyrl_gym.envs.registration import registry

    if env_id not in registry:
        skyrl_gym.register(id=env_id, entry_point=ENTRY_POINT)
    return env_id
