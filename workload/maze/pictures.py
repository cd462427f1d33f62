"""Pictures for people: a maze's first frame, and an episode strip (frames with actions under them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from workload.maze.actions import DIRECTION_NAMES, STOP
from workload.maze.env import Maze2D
from workload.maze.render import DEFAULT_CELL_PX

STRIP_GAP_PX = 6
LABEL_HEIGHT_PX = 18
STRIP_COLUMNS = 8
_LABELS = {f"('move', {d})": name for d, name in DIRECTION_NAMES.items()} | {STOP: "stop"}
MAX_LABEL_CHARS = 18


def maze_picture(init_state: dict, cell_px: int = DEFAULT_CELL_PX) -> Image.Image:
    """The first frame of the maze ``init_state`` describes, as VisGym draws it."""
    size = len(init_state["maze_map"])
    frame, _ = Maze2D(size, cell_px=cell_px).reset(init_state=init_state)
    return Image.fromarray(frame)


def action_label(action: str | None) -> str:
    """Short caption: 'right', 'up', 'left', 'down', 'stop', '(no action)' or the clipped raw text."""
    if not action:
        return "(no action)"
    label = _LABELS.get(action, action)
    return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 3] + "..."


def episode_strip(
    frames: Sequence[np.ndarray | Image.Image], actions: Sequence[str | None], *, columns: int = STRIP_COLUMNS
) -> Image.Image:
    """Frames side by side (wrapping after ``columns``), each captioned with the action that led to it.

    ``actions`` has one entry per frame, or one fewer (the first frame is then captioned 'start').
    """
    if not frames:
        raise ValueError("episode_strip needs at least one frame")
    if len(actions) == len(frames) - 1:
        actions = ["start", *actions]
    if len(actions) != len(frames):
        raise ValueError(
            f"got {len(frames)} frames and {len(actions)} actions; pass one action per frame or one fewer"
        )
    images = [
        f if isinstance(f, Image.Image) else Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames
    ]
    width = max(image.width for image in images)
    height = max(image.height for image in images)
    columns = max(1, min(columns, len(images)))
    rows = -(-len(images) // columns)
    tile_h = height + LABEL_HEIGHT_PX
    strip = Image.new(
        "RGB",
        (columns * width + (columns + 1) * STRIP_GAP_PX, rows * tile_h + (rows + 1) * STRIP_GAP_PX),
        "white",
    )
    draw = ImageDraw.Draw(strip)
    font = ImageFont.load_default()
    for index, (image, action) in enumerate(zip(images, actions, strict=True)):
        left = STRIP_GAP_PX + (index % columns) * (width + STRIP_GAP_PX)
        top = STRIP_GAP_PX + (index // columns) * (tile_h + STRIP_GAP_PX)
        strip.paste(image.convert("RGB"), (left, top))
        caption = f"{index}: {action if action == 'start' else action_label(action)}"
        draw.text((left + 2, top + height + 3), caption, fill="black", font=font)
    return strip
