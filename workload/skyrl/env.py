"""``MazeEnv``: the maze conversation as a skyrl-gym 0.4 ``BaseTextEnv`` (the SkyRL plugin's env class).

The episode itself (prompts, feedback, action extraction, strict reward, the extras and
settings it reads) is ``workload.maze.conversation.MazeConversation``; this module adds
skyrl-gym's base class and the registration. SkyRL puts ``generator.max_turns`` into each
episode's ``extras``.
"""

from __future__ import annotations

from skyrl_gym.envs.base_text_env import BaseTextEnv

from workload.maze.conversation import MazeConversation

ENV_ID = "maze"
ENTRY_POINT = "workload.skyrl.env:MazeEnv"


class MazeEnv(MazeConversation, BaseTextEnv):
    """One maze episode for SkyRL: ``MazeConversation``'s game behind skyrl-gym's env interface."""


def register_maze_env(env_id: str = ENV_ID) -> str:
    """Register ``MazeEnv`` with skyrl-gym under ``env_id`` (idempotent); returns the id."""
    import skyrl_gym
    from skyrl_gym.envs.registration import registry

    if env_id not in registry:
        skyrl_gym.register(id=env_id, entry_point=ENTRY_POINT)
    return env_id
