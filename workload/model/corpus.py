"""The text the tiny tokenizer is trained on: maze prompts, feedback and actions.

Byte-level BPE is lossless on any text, so the corpus only decides which strings get
short encodings; it covers the VisGym prompt at every maze size, the feedback strings,
the compact rehearsal instruction and the action tuples.
"""

from __future__ import annotations

from collections.abc import Iterator

from workload.maze.actions import ACTION_STRINGS
from workload.maze.prompts import COMPACT_INSTRUCTION, FORMAT_INSTRUCTION, visgym_prompt

_FEEDBACK = (
    "Action executed successfully.",
    "Cannot move into a wall.",
    "Environment feedback: ",
    "This is step {k}. You are allowed to take {m} more steps.",
    "The action format is invalid.",
    "Cannot parse action string so the action is invalid.",
)


def prompt_corpus() -> Iterator[str]:
    """Yield the training texts in a fixed order (the tokenizer build is deterministic)."""
    for n in (5, 7, 9, 11, 13):
        yield visgym_prompt(n) + FORMAT_INSTRUCTION
    for k in range(16):
        for line in _FEEDBACK:
            yield line.format(k=k, m=15 - k)
    yield COMPACT_INSTRUCTION
    for _ in range(4):
        yield from ACTION_STRINGS
        yield from (f"<think></think><answer>{a}</answer>" for a in ACTION_STRINGS)
    yield " ".join(str(i) for i in range(100))
