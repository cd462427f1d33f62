"""``Maze2D``: VisGym's ``maze_2d`` environment (rules, feedback, reward, frames) without pygame.

## Description
A size x size grid (9 = VisGym easy, 11 = hard) whose border is wall and whose inside is
a perfect maze from Wilson's algorithm. The agent (blue circle) starts in one corner;
the target (red square) is in the opposite corner.

## Action space
Text of a Python 2-tuple: ``('move', d)`` with d = 0 right, 1 up, 2 left, 3 down, or
``('stop', s)`` where s is 1-4 ASCII letters/digits (VisGym's ``Text(4)`` space), as in
``('stop', 'stop')``. Any other text is answered with VisGym's feedback, never an exception.

## Rewards and termination
Stop ends the episode (``terminated``); reward is 1.0 only if the agent stops on the
target, else 0.0. There is no truncation inside the env: turn caps belong to the caller.

## Observation
An H x W x 3 uint8 frame, ``cell_px`` (25 in VisGym) pixels a cell (``render.Canvas``).

## Faithfulness notes
Same generator and seeding path, pixels, prompt, feedback strings and reward as VisGym
(`gymnasium/envs/maze_2d/maze_2d.py`). Two deliberate differences, both on inputs VisGym
crashes or misdraws on: a move payload too large for int64 gets the "not in the valid
action space" feedback (VisGym raises OverflowError), and every reset starts a fresh
canvas (VisGym draws the first frame of a reused env over the previous maze; SkyRL's
recipe builds one env per episode, so its frames never show that). ``info`` carries
locations as (row, col) tuples where VisGym has numpy arrays.
"""

from __future__ import annotations

import ast
import string
from typing import ClassVar

import numpy as np

from workload.maze import generator, render
from workload.maze.actions import ACTION_STRINGS, DIRECTION_STEPS

FEEDBACK_OK = "Action executed successfully."
FEEDBACK_WALL = "Cannot move into a wall."
FEEDBACK_BAD_FORMAT = (
    "The action format is invalid. The action should be a tuple of two elements with the first "
    "element being the action name and the second element being the action payload."
)
STOP_PAYLOAD_MAX_CHARS = 4  # VisGym: "stop": Text(4)
_STOP_PAYLOAD_CHARSET = frozenset(string.ascii_letters + string.digits)  # gymnasium Text default
# literal_eval is pure, so the canonical strings skip it (most steps of a trained policy).
_CANONICAL = {text: ast.literal_eval(text) for text in ACTION_STRINGS}


def feedback_unparsable(action: object, error: Exception) -> str:
    """VisGym's feedback when ``ast.literal_eval`` rejects the action text."""
    return f"Cannot parse action string {action!r}: {error} so the action is invalid."


def feedback_invalid_payload(branch: object, payload: object) -> str:
    """VisGym's feedback for a known action name with a payload outside its space."""
    return f"The action {payload} is not in the valid action space of {branch} so nothing is executed."


def feedback_unknown_action(branch: object) -> str:
    """VisGym's feedback for an action name other than 'move' and 'stop'."""
    return f"The action name '{branch}' is not recognized in the available action space."


def _is_direction(payload: object) -> bool:
    # gymnasium Discrete(4).contains: Python ints (bool included) in [0, 4).
    return isinstance(payload, int) and 0 <= payload < len(DIRECTION_STEPS)


def _is_stop_payload(payload: object) -> bool:
    return (
        isinstance(payload, str)
        and 1 <= len(payload) <= STOP_PAYLOAD_MAX_CHARS
        and all(ch in _STOP_PAYLOAD_CHARSET for ch in payload)
    )


class Maze2D:
    """VisGym ``maze_2d``; see the module docstring.

    ``reset``, ``step``, ``render`` and ``close`` keep the call and return shapes of VisGym's
    gymnasium env (``reset`` -> ``(obs, info)``, ``step`` -> ``(obs, reward, terminated,
    truncated, info)``), but this is not a ``gymnasium.Env``: the package needs no gymnasium.
    """

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array", "ansi"]}

    def __init__(self, size: int = 9, *, cell_px: int = render.DEFAULT_CELL_PX, seed: int | None = None):
        self.size = generator.check_size(size)
        self.cell_px = cell_px
        self.np_random = generator.make_rng(seed)
        self._canvas = render.Canvas(size, size, cell_px=cell_px)
        self.maze_map: np.ndarray | None = None
        self.agent: tuple[int, int] = (0, 0)
        self.target: tuple[int, int] = (0, 0)
        self._previous: tuple[int, int] | None = None
        self.env_feedback = ""

    # -- VisGym's env methods ----------------------------------------------------------
    def reset(self, seed: int | None = None, init_state: dict | None = None, options: dict | None = None):
        """Draw a new maze (from ``seed`` or the env's RNG) or load ``init_state``; return (obs, info)."""
        if seed is not None:
            self.np_random = generator.make_rng(seed)
        if init_state is not None:
            self.maze_map, self.agent, self.target = self._load_init_state(init_state)
        else:
            self.maze_map, self.agent, self.target = generator.generate(self.np_random, self.size)
        self._previous = None
        self.env_feedback = ""
        self._canvas.paint_board(self.maze_map, self.target)
        return self._observe(), self._info()

    def step(self, action_text: str):
        """Apply one action text; return (obs, reward, terminated, truncated, info)."""
        self._require_maze()
        terminated = False
        self.env_feedback = self._apply(action_text)
        if self.env_feedback is None:  # a valid stop
            terminated = True
            self.env_feedback = FEEDBACK_OK
        reward = 1.0 if terminated and self.agent == self.target else 0.0
        return self._observe(), reward, terminated, False, self._info()

    def render(self, mode: str = "rgb_array"):
        """The current frame (``rgb_array``, H x W x 3 uint8) or VisGym's ``ansi`` text."""
        if mode == "ansi":
            return render.render_ansi(self._require_maze(), self.agent, self.target)
        if mode == "rgb_array":
            self._require_maze()
            return self._observe()
        raise ValueError(f"Invalid render mode: {mode!r}; use 'rgb_array' or 'ansi'")

    def get_init_state(self) -> dict:
        """``{"maze_map", "agent_location", "target_location"}`` as lists, for ``reset(init_state=...)``.

        As in VisGym the agent location is the current one: call it right after ``reset``.
        """
        return {
            "maze_map": self._require_maze().tolist(),
            "agent_location": list(self.agent),
            "target_location": list(self.target),
        }

    def get_prompt(self) -> str:
        """VisGym's task prompt for this maze (rgb mode)."""
        from workload.maze.prompts import visgym_prompt

        return visgym_prompt(self.size)

    def close(self) -> None:
        """Nothing to release (no window); VisGym's env has it."""

    # -- rules ----------------------------------------------------------------------------
    def _apply(self, action_text: object) -> str | None:
        """Apply the action; return VisGym's feedback, or None for a valid stop."""
        try:
            parsed = (
                _CANONICAL[action_text]
                if isinstance(action_text, str) and action_text in _CANONICAL
                else ast.literal_eval(action_text)
            )
        except Exception as error:  # VisGym reports any literal_eval failure as feedback
            return feedback_unparsable(action_text, error)
        if not isinstance(parsed, tuple) or len(parsed) != 2:
            return FEEDBACK_BAD_FORMAT
        branch, payload = parsed
        if branch == "move":
            if not _is_direction(payload):
                return feedback_invalid_payload(branch, payload)
            dr, dc = DIRECTION_STEPS[int(payload)]
            nxt = (self.agent[0] + dr, self.agent[1] + dc)
            inside = 0 <= nxt[0] < self.size and 0 <= nxt[1] < self.size
            if not inside or self.maze_map[nxt] == generator.WALL:
                return FEEDBACK_WALL
            self._previous, self.agent = self.agent, nxt
            return FEEDBACK_OK
        if branch == "stop":
            return None if _is_stop_payload(payload) else feedback_invalid_payload(branch, payload)
        return feedback_unknown_action(branch)

    # -- helpers --------------------------------------------------------------------------
    def _observe(self) -> np.ndarray:
        return self._canvas.draw_agent(self.agent, self._previous).copy()

    def _info(self) -> dict:
        return {
            "distance": abs(self.agent[0] - self.target[0]) + abs(self.agent[1] - self.target[1]),
            "agent": self.agent,
            "target": self.target,
            "maze_map": self.maze_map,
            "env_feedback": self.env_feedback,
        }

    def _require_maze(self) -> np.ndarray:
        if self.maze_map is None:
            raise RuntimeError("call reset() before step(), render() or get_init_state()")
        return self.maze_map

    def _load_init_state(self, init_state: dict) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
        missing = {"maze_map", "agent_location", "target_location"} - set(init_state)
        if missing:
            raise ValueError(f"init_state lacks {sorted(missing)}; pass the dict get_init_state() returns")
        maze_map = np.asarray(init_state["maze_map"], dtype=np.int64)
        if maze_map.shape != (self.size, self.size):
            raise ValueError(
                f"init_state maze_map has shape {maze_map.shape}, this env is {self.size}x{self.size}; "
                f"build Maze2D(size={maze_map.shape[0] if maze_map.ndim else '?'}) for it"
            )
        cells = []
        for key in ("agent_location", "target_location"):
            r, c = (int(v) for v in init_state[key])
            if not (0 <= r < self.size and 0 <= c < self.size) or maze_map[r, c] == generator.WALL:
                raise ValueError(
                    f"init_state {key} {[r, c]} is not a floor cell of the {self.size}x{self.size} map"
                )
            cells.append((r, c))
        return maze_map, cells[0], cells[1]
