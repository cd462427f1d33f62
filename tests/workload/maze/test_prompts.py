"""Prompt text and the OpenAI-style user messages with a PNG data-URI frame."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from workload.maze import Maze2D
from workload.maze.prompts import (
    COMPACT_INSTRUCTION,
    EMPTY_FEEDBACK,
    FORMAT_INSTRUCTION,
    build_user_message,
    data_uri_to_image,
    frame_to_data_uri,
    visgym_prompt,
)


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    return Maze2D(9).reset(seed=0)[0]


def test_visgym_prompt_text():
    prompt = visgym_prompt(9)
    assert prompt.startswith(
        "You are navigating a 9x9 maze. The maze consists of walls (gray) and paths (white). "
        "You are represented by a blue circle, and your goal is to reach the red target square.\n\nAvailable actions:\n"
        "1. 'move': Move in one of four directions. Format: `('move', direction)` where direction is an integer:\n"
        "   - 0=right, 1=up, 2=left, 3=down\n2. 'stop': End the navigation session. Format: `('stop', 'stop')`"
        "\n\nSuccess: You succeed if you reach the red target square.\n\n"
    )
    assert prompt.endswith("- To move down: `('move', 3)`\n- To stop: `('stop', 'stop')`")


def test_data_uri_round_trip_is_lossless(frame):
    uri = frame_to_data_uri(frame)
    assert uri.startswith("data:image/png;base64,")
    image = data_uri_to_image(uri)
    assert image.size == (225, 225) and image.mode == "RGB"
    assert np.array_equal(np.asarray(image), frame)


def test_a_remembered_data_uri_follows_the_frame_content_not_the_array_object(frame):
    """Data URIs are remembered by frame content: an array drawn over in place gets a new one."""
    canvas = frame.copy()
    first = frame_to_data_uri(canvas)
    assert frame_to_data_uri(canvas.copy()) == first  # the same pixels: the same URI
    canvas[0, 0] = [255, 0, 0]
    changed = frame_to_data_uri(canvas)
    assert changed != first and np.array_equal(np.asarray(data_uri_to_image(changed)), canvas)
    assert frame_to_data_uri(Image.fromarray(canvas)) == changed  # PIL images are encoded alike


@pytest.mark.parametrize(
    "uri", ["http://x/y.png", "data:image/png;base64,!!!", "data:image/png;base64,aGVsbG8=", 5]
)
def test_bad_data_uris_are_rejected(uri):
    with pytest.raises(ValueError, match="data URI"):
        data_uri_to_image(uri)


def test_visgym_first_message_has_prompt_format_instruction_and_frame(frame):
    message = build_user_message(style="visgym", frame=frame, first=True, size=9)
    text, image = message["content"]
    assert message["role"] == "user"
    assert text == {"type": "text", "text": visgym_prompt(9) + FORMAT_INSTRUCTION}
    assert image["type"] == "image_url"
    assert np.array_equal(np.asarray(data_uri_to_image(image["image_url"]["url"])), frame)


def test_visgym_later_messages_carry_the_feedback(frame):
    message = build_user_message(
        style="visgym", frame=frame, feedback="Cannot move into a wall.", first=False
    )
    assert message["content"][0]["text"] == "Cannot move into a wall."
    assert (
        build_user_message(style="visgym", frame=frame, feedback="", first=False)["content"][0]["text"]
        == EMPTY_FEEDBACK
    )


def test_compact_messages_repeat_one_short_instruction_without_feedback(frame):
    first = build_user_message(style="compact", frame=frame, first=True)
    later = build_user_message(
        style="compact", frame=Image.fromarray(frame), feedback="Cannot move into a wall.", first=False
    )
    assert first["content"][0]["text"] == later["content"][0]["text"] == COMPACT_INSTRUCTION
    assert len(COMPACT_INSTRUCTION) < 200


def test_unknown_style_is_rejected(frame):
    with pytest.raises(ValueError, match="prompt style must be one of"):
        build_user_message(style="chatty", frame=frame, first=True)
