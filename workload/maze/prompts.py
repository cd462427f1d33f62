"""Prompt text and OpenAI-style user messages (text + PNG data-URI image) for the maze.

Two styles:
- ``visgym``: VisGym's ``get_prompt()`` text plus the tuple-format instruction SkyRL's
  VisGym SFT recipe appends, then each later turn the env's feedback string. This is what
  the VisGym SFT checkpoint and the published run saw.
- ``compact``: one short instruction on every turn and no feedback, for the rehearsal's
  tiny model (a short, constant text leaves its few parameters to the image).
"""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from workload.serving_rules import data_uri_bytes

STYLES = ("visgym", "compact")
DATA_URIS_KEPT_BYTES = 32 * 2**20  # frames remembered by frame_to_data_uri (keys + URIs): 32 MiB at most
_DATA_URIS: dict[tuple, str] = {}
_data_uri_bytes = 0

# SkyRL examples/train/visgym/env_sft.py appends this to VisGym's prompt.
FORMAT_INSTRUCTION = (
    "\n\nIMPORTANT: Respond with exactly one action as a Python tuple, "
    "e.g. ('move', 0) or ('stop', 'stop'). "
    "Do not wrap the action in backticks, code blocks, or other formatting."
)
# What SkyRL's recipe shows when a step returns no feedback text.
EMPTY_FEEDBACK = "Action executed. Here is the current state:"
COMPACT_INSTRUCTION = (
    "Maze: move the blue circle to the red square, then stop. "
    "Reply with one of ('move', 0) right, ('move', 1) up, ('move', 2) left, ('move', 3) down, ('stop', 'stop')."
)
def visgym_prompt(size: int) -> str:
    """VisGym ``maze_2d`` ``get_prompt()`` (rgb mode) for a size x size maze."""
    return (
        f"You are navigating a {size}x{size} maze. "
        "The maze consists of walls (gray) and paths (white). "
        "You are represented by a blue circle, and your goal is to reach the red target square."
        "\n\nAvailable actions:\n"
        "1. 'move': Move in one of four directions. Format: `('move', direction)` where direction is an integer:\n"
        "   - 0=right, 1=up, 2=left, 3=down\n"
        "2. 'stop': End the navigation session. Format: `('stop', 'stop')`"
        "\n\nSuccess: You succeed if you reach the red target square."
        "\n\nPlease respond with exactly one action and its arguments in the specified format. For example:\n"
        "- To move right: `('move', 0)`\n"
        "- To move up: `('move', 1)`\n"
        "- To move left: `('move', 2)`\n"
        "- To move down: `('move', 3)`\n"
        "- To stop: `('stop', 'stop')`"
    )


def first_turn_text(style: str, size: int) -> str:
    """The text of the first user message in ``style``."""
    _check_style(style)
    return visgym_prompt(size) + FORMAT_INSTRUCTION if style == "visgym" else COMPACT_INSTRUCTION


def frame_to_png(frame: np.ndarray | Image.Image) -> bytes:
    """PNG bytes of an H x W x 3 uint8 frame (or a PIL image)."""
    image = frame if isinstance(frame, Image.Image) else Image.fromarray(np.asarray(frame, dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def frame_to_data_uri(frame: np.ndarray | Image.Image) -> str:
    """``data:image/png;base64,...`` for a frame: the ``image_url`` form OpenAI-style APIs accept.

    Array frames are encoded once while they keep coming back (an episode bumping a wall, the
    rollouts of one maze passing the same cells): up to ``DATA_URIS_KEPT_BYTES`` are remembered.
    """
    global _data_uri_bytes
    if isinstance(frame, Image.Image):
        return "data:image/png;base64," + base64.b64encode(frame_to_png(frame)).decode("ascii")
    array = np.asarray(frame, dtype=np.uint8)
    key = (array.shape, array.tobytes())
    uri = _DATA_URIS.get(key)
    if uri is None:
        uri = "data:image/png;base64," + base64.b64encode(frame_to_png(array)).decode("ascii")
        size = len(key[1]) + len(uri)
        if _data_uri_bytes + size > DATA_URIS_KEPT_BYTES:
            _DATA_URIS.clear()
            _data_uri_bytes = 0
        _DATA_URIS[key] = uri
        _data_uri_bytes += size
    return uri


def data_uri_to_image(uri: str) -> Image.Image:
    """Decode a base64 image data URI into an RGB PIL image; ValueError says what is wrong."""
    raw = data_uri_bytes(uri)  # the one data-URI rule the endpoint applies too
    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except OSError as error:
        raise ValueError(f"image data URI does not hold a readable image: {error}") from error
    return image.convert("RGB")


def build_user_message(
    *, style: str, frame: np.ndarray | Image.Image, feedback: str | None = None, first: bool, size: int = 9
) -> dict:
    """One user turn: ``{"role": "user", "content": [text part, image_url part]}``.

    ``first`` selects the task prompt; later turns carry ``feedback`` (``visgym``) or the
    same short instruction (``compact``). ``size`` only enters the ``visgym`` prompt text.
    """
    _check_style(style)
    if first:
        text = first_turn_text(style, size)
    elif style == "visgym":
        text = feedback or EMPTY_FEEDBACK
    else:
        text = COMPACT_INSTRUCTION
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": frame_to_data_uri(frame)}},
        ],
    }


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"prompt style must be one of {STYLES}, got {style!r}")
