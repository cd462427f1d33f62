"""VisGym-faithful maze_2d: generator, rules, renderer, solver, prompts, frozen held-out sets,
one episode as a chat (``conversation``) and the strict metrics over episodes (``metrics``).

This package imports nothing heavier than numpy and PIL.
"""

from workload.maze.actions import ACTION_STRINGS, extract_action, parse_action
from workload.maze.env import Maze2D

__all__ = ["ACTION_STRINGS", "Maze2D", "extract_action", "parse_action"]
