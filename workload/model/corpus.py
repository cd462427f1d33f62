"""The text the tiny tokenizer is trained on: maze prompts, feedback and actions.

Byte-level BPE is lossless on any text, so the corpus only decides which strings get
short encodings; it covers the VisGym prompt at every maze size, every feedback text the
maze answers with (taken from the maze code itself), the compact rehearsal instruction and
the action tuples.
"""

from __future__ import annotations

from collections.abc import Iterator

from workload.maze.actions import ACTION_STRINGS
from workload.maze.conversation import PARSE_FAILURE_FEEDBACK
from workload.maze.env import (
    FEEDBACK_BAD_FORMAT,
    FEEDBACK_OK,
    FEEDBACK_WALL,
    feedback_invalid_payload,
    feedback_unknown_action,
    feedback_unparsable,
)
from workload.maze.prompts import COMPACT_INSTRUCTION, EMPTY_FEEDBACK, FORMAT_INSTRUCTION, visgym_prompt

MAZE_SIZES = (5, 7, 9, 11, 13)
FEEDBACK_REPEATS = 16  # feedback recurs on every turn, so it weighs more than the one-off prompt


def feedback_texts() -> tuple[str, ...]:
    """Every feedback text of the maze; the ones that quote the reply, with a sample reply."""
    return (
        FEEDBACK_OK,
        FEEDBACK_WALL,
        FEEDBACK_BAD_FORMAT,
        PARSE_FAILURE_FEEDBACK,
        EMPTY_FEEDBACK,
        feedback_unparsable("move left", SyntaxError("invalid syntax")),
        feedback_invalid_payload("move", 5),
        feedback_unknown_action("jump"),
    )


def prompt_corpus() -> Iterator[str]:
    """Yield the training texts in a fixed order (the tokenizer build is deterministic)."""
    for n in MAZE_SIZES:
        yield visgym_prompt(n) + FORMAT_INSTRUCTION
    for _ in range(FEEDBACK_REPEATS):
        yield from feedback_texts()
    for _ in range(FEEDBACK_REPEATS):
        yield COMPACT_INSTRUCTION
    for _ in range(4):
        yield from ACTION_STRINGS
        yield from (f"<think></think><answer>{a}</answer>" for a in ACTION_STRINGS)
    yield " ".join(str(i) for i in range(100))
