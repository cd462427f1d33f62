"""VisGym's maze action grammar, and pulling one action out of a model's free-text reply.

An action is the text of a Python 2-tuple: ``('move', d)`` with d = 0 right, 1 up,
2 left, 3 down, or ``('stop', 'stop')``. ``Maze2D.step`` takes such text and judges it
the way VisGym does; this module finds the tuple inside a longer reply (reasoning,
``<action>`` tags, Markdown back-ticks), as SkyRL's VisGym recipe does before stepping.
"""

from __future__ import annotations

import ast
import re

MOVE_RIGHT = "('move', 0)"
MOVE_UP = "('move', 1)"
MOVE_LEFT = "('move', 2)"
MOVE_DOWN = "('move', 3)"
STOP = "('stop', 'stop')"
ACTION_STRINGS = (MOVE_RIGHT, MOVE_UP, MOVE_LEFT, MOVE_DOWN, STOP)

# VisGym `_action_to_direction`: direction -> (row, col) step.
DIRECTION_STEPS = {0: (0, 1), 1: (-1, 0), 2: (0, -1), 3: (1, 0)}
STEP_DIRECTIONS = {step: direction for direction, step in DIRECTION_STEPS.items()}
DIRECTION_NAMES = {0: "right", 1: "up", 2: "left", 3: "down"}

# Replies longer than this are only scanned up to here: a reply is at most ~1k tokens.
MAX_SCAN_CHARS = 20_000
_TUPLE_START = re.compile(r"""\(\s*(['"]?)([A-Za-z_]\w*)\1\s*,""")
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def _balanced(text: str, start: int) -> str | None:
    """The substring from ``text[start] == '('`` to its matching ')', skipping quoted text."""
    depth, quote, i = 0, None, start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        i += 1
    return None


def _first_tuple(text: str) -> str | None:
    for match in _TUPLE_START.finditer(text):
        candidate = _balanced(text, match.start())
        if candidate is None:
            continue
        if not match.group(1):  # (move, 0): quote the bare action name
            name_at = match.start(2) - match.start()
            candidate = f"{candidate[:name_at]}'{match.group(2)}'{candidate[name_at + len(match.group(2)) :]}"
        try:
            parsed = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(parsed, tuple) and len(parsed) == 2:
            return candidate
    return None


def extract_action(text: str) -> str | None:
    """The first action tuple in a reply, as text ready for ``Maze2D.step``; None if there is none.

    The last ``<action>...</action>`` block is searched first (a model may mention other
    tuples while reasoning), then the whole reply, then the reply without back-ticks.
    Only the tuple's shape is checked here; ``Maze2D.step`` judges its content.
    """
    if not isinstance(text, str):
        return None
    text = text[:MAX_SCAN_CHARS]
    tags = _ACTION_TAG.findall(text)
    for scope in ([tags[-1]] if tags else []) + [text, text.replace("`", "")]:
        found = _first_tuple(scope)
        if found is not None:
            return found
    return None


def parse_action(text: str) -> tuple | None:
    """The action tuple in a reply, e.g. ``('move', 0)``; None if the reply holds no 2-tuple."""
    found = extract_action(text)
    return None if found is None else ast.literal_eval(found)
