"""Pixel-exact VisGym maze frames drawn with numpy into a preallocated canvas (no pygame).

VisGym draws on a persistent pygame ``Surface``: white fill, one gray 25 px square per
wall cell (border included), a red square on the target, then each frame a white circle
over the previous agent position and a blue circle at the current one. The canvas keeps
those strokes, so crossing the red target leaves a white dot in it; a frame is the canvas
after the latest strokes. ``Canvas`` reproduces that state machine; the circle is the
pixel set ``pygame.draw.circle`` fills (center and radius truncated to ints, midpoint
scan lines), which the benchmark checks frame for frame against pygame.
"""

from __future__ import annotations

import numpy as np

# VisGym maze_2d: `_window_pixel_size = 25` and its colours.
DEFAULT_CELL_PX = 25
# Largest frame side drawn: 4096 px is a 48 MiB RGB frame (VisGym's 9x9 and 11x11 boards at 25 px are 225 and
# 275 px); a bigger board or cell is refused before any memory is taken.
MAX_FRAME_SIDE_PX = 4096
BACKGROUND_RGB = (255, 255, 255)
WALL_RGB = (169, 169, 169)
TARGET_RGB = (255, 0, 0)
AGENT_RGB = (0, 0, 255)
AGENT_RADIUS_FRACTION = 0.25  # VisGym: radius = cell / 4


def circle_offsets(radius: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column offsets, from an int center, of the pixels a filled pygame circle covers.

    pygame 2 fills horizontal spans from a midpoint-circle walk; each span runs from
    ``x0 - a`` to ``x0 + a - 1``, so the disc is ``2 * radius`` pixels wide. Radius < 1 draws nothing.
    """
    spans: dict[int, int] = {}  # row offset -> half width a (span covers -a .. a-1)

    def span(dy: int, half: int) -> None:
        spans[dy] = max(spans.get(dy, 0), half)

    f, ddf_x, ddf_y, x, y = 1 - radius, 0, -2 * radius, 0, radius
    while radius >= 1 and x < y:
        if f >= 0:
            y -= 1
            ddf_y += 2
            f += ddf_y
        x += 1
        ddf_x += 2
        f += ddf_x + 1
        if f >= 0:
            span(y - 1, x)
            span(-y, x)
        span(x - 1, y)
        span(-x, y)
    rows = [np.full(2 * half, dy) for dy, half in sorted(spans.items())]
    cols = [np.arange(-half, half) for _, half in sorted(spans.items())]
    if not rows:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    return np.concatenate(rows).astype(np.intp), np.concatenate(cols).astype(np.intp)


class Canvas:
    """The persistent VisGym canvas for one maze, drawn into one preallocated uint8 frame."""

    def __init__(self, height_cells: int, width_cells: int, *, cell_px: int = DEFAULT_CELL_PX):
        if isinstance(cell_px, bool) or not isinstance(cell_px, int) or cell_px < 1:
            raise ValueError(f"cell_px must be a positive int (VisGym draws 25), got {cell_px!r}")
        if max(height_cells, width_cells) * cell_px > MAX_FRAME_SIDE_PX:
            raise ValueError(f"a {height_cells}x{width_cells} board at {cell_px} px a cell is "
                             f"{max(height_cells, width_cells) * cell_px} px a side, over the {MAX_FRAME_SIDE_PX} px "
                             f"drawn at most: at most {MAX_FRAME_SIDE_PX // cell_px} cells at {cell_px} px")
        self.cell_px = cell_px
        self.shape_cells = (height_cells, width_cells)
        self.frame = np.empty((height_cells * cell_px, width_cells * cell_px, 3), dtype=np.uint8)
        # View (cell rows, px, pixel row): painting the board copies one pixel row per cell row.
        self._cell_rows = self.frame.reshape(height_cells, cell_px, width_cells * cell_px * 3)
        self._cell_rgb = np.empty((height_cells, width_cells, 3), dtype=np.uint8)
        # The agent disc as a boolean mask over its bounding box, anchored at the int center.
        rows, cols = circle_offsets(int(cell_px * AGENT_RADIUS_FRACTION))
        self._disc_top = int(rows.min()) if rows.size else 0
        self._disc_left = int(cols.min()) if cols.size else 0
        extent = (int(np.ptp(rows)) + 1, int(np.ptp(cols)) + 1) if rows.size else (0, 0)
        self._disc_mask = np.zeros((*extent, 1), dtype=bool)
        self._disc_mask[rows - self._disc_top, cols - self._disc_left] = True
        self._colours = {rgb: np.array(rgb, dtype=np.uint8) for rgb in (BACKGROUND_RGB, AGENT_RGB)}

    def paint_board(self, maze_map: np.ndarray, target: tuple[int, int]) -> None:
        """Start a new canvas: background, wall squares, target square (VisGym's first render)."""
        self._cell_rgb[:] = BACKGROUND_RGB
        self._cell_rgb[np.asarray(maze_map) == 1] = WALL_RGB
        self._cell_rgb[target[0], target[1]] = TARGET_RGB
        pixel_rows = np.repeat(self._cell_rgb, self.cell_px, axis=1).reshape(self.shape_cells[0], 1, -1)
        self._cell_rows[:] = pixel_rows

    def _disc(self, cell: tuple[int, int], rgb: tuple[int, int, int]) -> None:
        if not self._disc_mask.size:
            return
        # pygame truncates the float center ((cell + 0.5) * px) to ints.
        top = int((cell[0] + 0.5) * self.cell_px) + self._disc_top
        left = int((cell[1] + 0.5) * self.cell_px) + self._disc_left
        box = self.frame[top : top + self._disc_mask.shape[0], left : left + self._disc_mask.shape[1]]
        np.copyto(box, self._colours[rgb], where=self._disc_mask)

    def draw_agent(self, agent: tuple[int, int], previous: tuple[int, int] | None) -> np.ndarray:
        """Erase the previous agent disc with white, draw the current one blue; return the frame."""
        if previous is not None:
            self._disc(previous, BACKGROUND_RGB)
        self._disc(agent, AGENT_RGB)
        return self.frame


def render_ansi(maze_map: np.ndarray, agent: tuple[int, int], target: tuple[int, int]) -> str:
    """VisGym's ``ansi`` mode: '#' wall, ' ' floor, 'T' target, 'A' agent, plus an extra '#' frame."""
    chars = np.where(np.asarray(maze_map) == 1, "#", " ").astype("<U1")
    chars[target] = "T"
    chars[agent] = "A"
    bordered = np.full((chars.shape[0] + 2, chars.shape[1] + 2), "#", dtype="<U1")
    bordered[1:-1, 1:-1] = chars
    return "\n".join("".join(row) for row in bordered)
