"""``MazeConversation``: one maze episode as a multi-turn chat, with no training framework.

One object plays one episode. ``init`` returns the first user message (prompt text +
the frame as a PNG data URI); each ``step`` takes the model's whole reply, pulls the
action tuple out of it, plays it on ``Maze2D`` and answers with the feedback text and the
new frame. The episode ends on a valid stop or after ``max_turns`` replies. The reward
arrives on the last step only. The SkyRL plugin's env class is this class plus skyrl-gym's
base class; the rehearsal and the endpoint evaluator play episodes through this class too,
so training and evaluation share prompts, feedback, action extraction and reward.

Reward: the strict task reward (1.0 for stopping on the target, else 0.0). The published
recipe's ``0.8 * task + 0.2 * format`` is available as ``format_bonus: 0.2``, off by
default, because it lets unsolved episodes count as SkyRL "passes".

Extras read (SkyRL passes every non-prompt dataset column): ``seed`` (None = a fresh
random maze), ``init_state`` (dict or JSON text; wins over the seed), ``maze_size``,
``max_turns``, and the settings ``format_bonus``, ``cell_px``, ``prompt_style``
("visgym" | "compact"). The settings may also come from ``env_config``; an extra wins,
because SkyRL 0.4's strict config has no section for a custom env, so the cluster
recipe sends them on each dataset row.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workload.maze import Maze2D, extract_action
from workload.maze.env import FEEDBACK_WALL
from workload.maze.metrics import Episode
from workload.maze.prompts import STYLES, build_user_message
from workload.maze.render import DEFAULT_CELL_PX
from workload.maze.solver import shortest_path_len

DEFAULT_MAZE_SIZE = 9  # VisGym maze_2d/easy
DEFAULT_MAX_TURNS = 15  # the published run's cap
PARSE_FAILURE_FEEDBACK = (
    "Action parsing failed. Could not find a valid action tuple in your response. "
    "Please respond with exactly one action as a Python tuple, e.g. ('move', 0) or ('stop', 'stop')."
)
# The SFT format SkyRL's recipe rewards: all three tags present with non-empty content.
_FORMAT_TAGS = tuple(
    re.compile(rf"<{tag}>(.*?)</{tag}>", re.DOTALL) for tag in ("observation", "justification", "action")
)


_SETTING_KEYS = ("format_bonus", "cell_px", "prompt_style")


@dataclass(frozen=True)
class MazeEnvConfig:
    """Env-wide settings (SkyRL ``environment.skyrl_gym.maze``), validated once."""

    format_bonus: float = 0.0
    cell_px: int = DEFAULT_CELL_PX
    prompt_style: str = "visgym"

    @classmethod
    def from_any(cls, config: Any) -> MazeEnvConfig:
        """Build from None, a mapping (dict, DictConfig) or an object with those attributes."""
        if config is None:
            return cls()
        lookup = (
            config.get if hasattr(config, "get") else (lambda key, default: getattr(config, key, default))
        )

        def get(key: str, default: Any) -> Any:
            value = lookup(key, None)
            return default if _missing(value) else value

        try:
            made = cls(
                format_bonus=float(get("format_bonus", 0.0)),
                cell_px=int(get("cell_px", DEFAULT_CELL_PX)),
                prompt_style=str(get("prompt_style", "visgym")),
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"maze env settings format_bonus / cell_px must be numbers: {error}") from None
        if not 0.0 <= made.format_bonus <= 1.0:
            raise ValueError(
                f"format_bonus must be in [0, 1] (0.2 = the published recipe), got {made.format_bonus}"
            )
        if made.prompt_style not in STYLES:
            raise ValueError(f"prompt_style must be one of {STYLES}, got {made.prompt_style!r}")
        if made.cell_px < 1:
            raise ValueError(f"cell_px must be >= 1 (VisGym draws 25), got {made.cell_px}")
        return made


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))  # parquet nulls arrive as NaN


def _int_extra(extras: Mapping, key: str, default: int | None) -> int | None:
    value = extras.get(key)
    if _missing(value):
        return default
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"extras[{key!r}] must be an integer, got {value!r}") from None
    if as_int != value:
        raise ValueError(f"extras[{key!r}] must be an integer, got {value!r}")
    return as_int


def _init_state_extra(extras: Mapping) -> dict | None:
    value = extras.get("init_state")
    if _missing(value) or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"extras['init_state'] is not valid JSON ({error}); write Maze2D.get_init_state() with json.dumps"
            ) from None
    if not isinstance(value, Mapping):
        raise ValueError(f"extras['init_state'] must be a dict or its JSON text, got {type(value).__name__}")
    return dict(value)


def has_valid_format(reply: str) -> bool:
    """True when the reply has non-empty ``<observation>``, ``<justification>`` and ``<action>`` tags."""
    return all((m := tag.search(reply)) is not None and m.group(1).strip() for tag in _FORMAT_TAGS)


class MazeConversation:
    """One maze episode as a chat; see the module docstring for extras, config and reward."""

    def __init__(self, env_config: Any = None, extras: Mapping | None = None):
        super().__init__()  # cooperative: a framework base class (skyrl-gym's) comes next in the MRO
        self.turns = 0
        extras = extras or {}
        base = MazeEnvConfig.from_any(env_config)
        # SkyRL 0.4's strict config has no section for a custom env, so the cluster recipe
        # sends the settings on each ticket; a ticket's value wins over env_config.
        overrides = {key: extras[key] for key in _SETTING_KEYS if not _missing(extras.get(key))}
        self.config = MazeEnvConfig.from_any({**base.__dict__, **overrides}) if overrides else base
        self.size = _int_extra(extras, "maze_size", DEFAULT_MAZE_SIZE)
        self.seed = _int_extra(extras, "seed", None)
        self.init_state = _init_state_extra(extras)
        self.max_turns = _int_extra(extras, "max_turns", DEFAULT_MAX_TURNS)
        if self.max_turns < 1:
            raise ValueError(f"extras['max_turns'] must be >= 1, got {self.max_turns}")
        self.style = self.config.prompt_style
        self.maze = Maze2D(self.size, cell_px=self.config.cell_px, seed=self.seed)
        self.start_state: dict | None = None
        self.shortest_path_len: int | None = None
        self.actions: list[str] = []
        self.wall_bumps = self.parse_failures = self.formatted_turns = 0
        self.solved = self.stopped = self.reached_goal = self.done = False
        self.task_reward = 0.0

    def init(self, prompt: Any = None) -> tuple[list[dict], dict]:
        """Reset the maze; return ``[first user message]`` (the dataset prompt is a placeholder)."""
        frame, _ = self.maze.reset(seed=self.seed, init_state=self.init_state)
        self.start_state = self.maze.get_init_state()
        self.shortest_path_len = shortest_path_len(self.start_state)
        message = build_user_message(style=self.style, frame=frame, first=True, size=self.size)
        return [message], {"seed": self.seed, "shortest_path_len": self.shortest_path_len}

    def step(self, action: str) -> dict[str, Any]:
        """Play one model reply; the reward comes with ``done``."""
        if self.done:
            return {"observations": [], "reward": 0.0, "done": True, "metadata": {"after_done": True}}
        self.turns += 1
        reply = action if isinstance(action, str) else ""
        self.formatted_turns += has_valid_format(reply)
        extracted = extract_action(reply)
        terminated, reward = False, 0.0
        if extracted is None:
            self.parse_failures += 1
            frame, feedback = self.maze.render(), PARSE_FAILURE_FEEDBACK
        else:
            frame, reward, terminated, _, info = self.maze.step(extracted)
            feedback = info["env_feedback"]
            self.wall_bumps += feedback == FEEDBACK_WALL
        self.actions.append(extracted or "")
        self.reached_goal |= self.maze.agent == self.maze.target
        self.stopped, self.task_reward = terminated, reward
        self.solved = terminated and reward == 1.0
        self.done = terminated or self.turns >= self.max_turns
        observations = (
            []
            if self.done
            else [build_user_message(style=self.style, frame=frame, feedback=feedback, first=False)]
        )
        return {
            "observations": observations,
            "reward": self._final_reward() if self.done else 0.0,
            "done": self.done,
            "metadata": {
                "env_feedback": feedback,
                "extracted_action": extracted,
                "terminated": terminated,
                "turns": self.turns,
            },
        }

    def _final_reward(self) -> float:
        bonus = self.config.format_bonus
        if bonus == 0.0:
            return self.task_reward
        return (1.0 - bonus) * self.task_reward + bonus * self.formatted_turns / max(self.turns, 1)

    def episode(self) -> Episode:
        """The episode as a ``workload.maze.metrics.Episode``."""
        return Episode(
            seed=self.seed,
            solved=self.solved,
            turns=self.turns,
            wall_bumps=self.wall_bumps,
            parse_failures=self.parse_failures,
            reached_goal_without_stop=self.reached_goal and not self.solved,
            reward=self._final_reward() if self.done else 0.0,
            shortest_path_len=self.shortest_path_len,
            actions=tuple(self.actions),
        )

    def get_metrics(self) -> dict[str, float]:
        """Per-episode numbers SkyRL logs: solved, turns, wall bumps, parse failures, reached goal without stop."""
        return {
            "solved": float(self.solved),
            "turns": float(self.turns),
            "wall_bumps": float(self.wall_bumps),
            "parse_failures": float(self.parse_failures),
            "reached_goal_without_stop": float(self.reached_goal and not self.solved),
            "stopped": float(self.stopped),
            "format_rate": self.formatted_turns / self.turns if self.turns else 0.0,
        }

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
        """Mean of each numeric metric over episodes (keys missing from an episode are skipped)."""
        sums: dict[str, list[float]] = {}
        for episode in metrics:
            for key, value in episode.items():
                if isinstance(value, int | float) and not isinstance(value, str):
                    sums.setdefault(key, []).append(float(value))
        return {key: sum(values) / len(values) for key, values in sums.items()}

