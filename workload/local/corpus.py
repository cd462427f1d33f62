"""The text the tiny tokenizer is trained on: maze prompts, feedback and actions.

Byte-level BPE is lossless on any text, so the corpus only decides which strings get
short encodings; it covers the VisGym prompt at every maze size, the feedback strings,
the compact rehearsal instruction and the action tuples.
"""

from __future__ import annotations

from collections.abc import Iterator

# VisGym maze_2d action strings (visgym-maze.md §2): 0 right, 1 up, 2 left, 3 down, then stop.
ACTION_STRINGS: tuple[str, ...] = (
    "('move', 0)",
    "('move', 1)",
    "('move', 2)",
    "('move', 3)",
    "('stop', 'stop')",
)

_VISGYM_PROMPT = (
    "You are navigating a {n}x{n} maze. The maze consists of walls (gray) and paths (white). "
    "You are represented by a blue circle, and your goal is to reach the red target square.\n\n"
    "Available actions:\n"
    "1. 'move': Move in one of four directions. Format: `('move', direction)` where direction is an integer:\n"
    "   - 0=right, 1=up, 2=left, 3=down\n"
    "2. 'stop': End the navigation session. Format: `('stop', 'stop')`\n\n"
    "Success: You succeed if you reach the red target square.\n\n"
    "Please respond with exactly one action and its arguments in the specified format. For example:\n"
    "- To move right: `('move', 0)`\n- To stop: `('stop', 'stop')`"
)

_FEEDBACK = (
    "Action executed successfully.",
    "Cannot move into a wall.",
    "Environment feedback: ",
    "This is step {k}. You are allowed to take {m} more steps.",
    "The action format is invalid.",
    "Cannot parse action string so the action is invalid.",
)

_COMPACT = (
    "Move the blue circle to the red square, then stop. Answer with one action.",
    "Reach the red target square and stop.",
)


def prompt_corpus() -> Iterator[str]:
    """Yield the training texts in a fixed order (the tokenizer build is deterministic)."""
    for n in (5, 7, 9, 11, 13):
        yield _VISGYM_PROMPT.format(n=n)
    for k in range(16):
        for line in _FEEDBACK:
            yield line.format(k=k, m=15 - k)
    yield from _COMPACT
    for _ in range(4):
        yield from ACTION_STRINGS
        yield from (f"<think></think><answer>{a}</answer>" for a in ACTION_STRINGS)
    yield " ".join(str(i) for i in range(100))
