"""What a user sets to evaluate through an endpoint: ``skymaze evaluate``'s options, one model.

`evaluate_endpoint` validates its arguments through :class:`EvaluateSettings` before anything
is played, and ``skymaze evaluate --help`` and the README's table print the descriptions. The
defaults are the published run's (VisGym prompt, 25 px cells, whole history, 15 turns,
1024-token replies); an adapter's ``trainer_config.json`` replaces those it knows
(`workload.evaluate.adapter_facts`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from workload.config import ConfigModel
from workload.maze.conversation import DEFAULT_MAX_TURNS
from workload.maze.heldout import SPECS
from workload.maze.prompts import STYLES
from workload.maze.render import DEFAULT_CELL_PX
from workload.serving_rules import MAX_IMAGES_PER_PROMPT

# The cluster recipe's eval max_generate_length (the SFT model reasons in tags before its action).
DEFAULT_MAX_TOKENS = 1024
DEFAULT_CONCURRENCY = 4
# The cluster model's prompt; the rehearsal's policy prompts in "compact".
DEFAULT_STYLE = "visgym"
DEFAULT_HELDOUT = "easy-64"


class EvaluateSettings(ConfigModel):
    """Which model plays which frozen held-out set through which endpoint, and how."""

    endpoint: str = Field(description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000 (its /v1 is added).")
    model: str = Field(description="Model id to play: BASE or BASE:ADAPTER.")
    set_name: str = Field(DEFAULT_HELDOUT, alias="heldout", description="Frozen held-out set: "
                          + " | ".join(sorted(SPECS)) + " (skymaze maze heldout).")
    style: Literal[STYLES] = Field(DEFAULT_STYLE, description="Prompt style: visgym (the cluster model) | compact "
                                   "(the rehearsal model).")
    max_turns: PositiveInt = Field(DEFAULT_MAX_TURNS, description="Turn cap of an episode (the published run's).")
    image_history: PositiveInt | None = Field(None, description="User turns, each with its frame, kept in the "
                                              "context (default: the whole episode).")
    cell_px: PositiveInt = Field(DEFAULT_CELL_PX, description="Pixels a maze cell (VisGym's; the rehearsal: 8).")
    max_tokens: PositiveInt = Field(DEFAULT_MAX_TOKENS, description="Reply length cap of a turn, in tokens.")
    concurrency: PositiveInt = Field(DEFAULT_CONCURRENCY, description="Episodes played at once.")
    limit: PositiveInt | None = Field(None, description="Play only the first N mazes of the set (default: all).")

    @field_validator("set_name")
    @classmethod
    def _known_set(cls, value: str) -> str:
        if value not in SPECS:
            raise ValueError(f"unknown held-out set {value!r}; known sets: {sorted(SPECS)}")
        return value

    @model_validator(mode="after")
    def _frames_fit_the_endpoint(self) -> EvaluateSettings:
        # The prompt of turn t holds t frames (one a user turn), or image_history of them.
        shown = min(self.max_turns, self.image_history or self.max_turns)
        if shown > MAX_IMAGES_PER_PROMPT:
            raise ValueError(
                f"max_turns {self.max_turns} puts {shown} frames in the last prompt, but the cluster endpoint accepts "
                f"{MAX_IMAGES_PER_PROMPT} images a prompt (vLLM's limit_mm_per_prompt); lower max_turns or keep "
                f"image_history at {MAX_IMAGES_PER_PROMPT} or fewer")
        return self
