"""``skymaze maze``: show, heldout, freeze through the CLI runner."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from workload.cli.main import app
from workload.maze.heldout import HELDOUT_DIR, MANIFEST_NAME

runner = CliRunner()


def test_show_writes_the_maze_png_and_prints_the_map(tmp_path):
    out, strip = tmp_path / "maze.png", tmp_path / "strip.png"
    result = runner.invoke(
        app, ["maze", "show", "--seed", "0", "--size", "9", "-o", str(out), "--strip", str(strip)]
    )
    assert result.exit_code == 0, result.output
    frame = np.asarray(Image.open(out).convert("RGB"))
    assert frame.shape == (225, 225, 3)
    assert tuple(frame[187, 37]) == (0, 0, 255) and tuple(frame[37, 187]) == (255, 0, 0)
    assert "## # # #T##" in result.stdout and "##A  #   ##" in result.stdout
    assert "shortest path: 12 moves + stop = 13 turns" in result.stdout
    assert Image.open(strip).width > 8 * 225
    assert "skymaze maze heldout" in result.stdout.splitlines()[-1]


def test_show_rejects_an_even_size_as_bad_input(tmp_path):
    result = runner.invoke(app, ["maze", "show", "--size", "8", "-o", str(tmp_path / "m.png")])
    assert result.exit_code == 2
    assert "odd integer" in result.stderr and not (tmp_path / "m.png").exists()


def test_show_reports_an_unwritable_output_as_failure(tmp_path):
    result = runner.invoke(app, ["maze", "show", "-o", str(tmp_path / "no" / "such" / "dir" / "m.png")])
    assert result.exit_code == 1 and "cannot write the picture" in result.stderr


def test_heldout_prints_the_table_and_mazes():
    result = runner.invoke(app, ["maze", "heldout", "--heldout", "easy-64", "--mazes"])
    assert result.exit_code == 0, result.output
    assert "| `easy-64` | 9x9 | 64 | 12: 50, 16: 14 | 50/64 | 64/64 |" in result.stdout
    assert "      0  [7, 1] -> [1, 7]  12" in result.stdout


def test_heldout_unknown_set_is_bad_input():
    result = runner.invoke(app, ["maze", "heldout", "--heldout", "easy-99"])
    assert result.exit_code == 2 and "known sets" in result.stderr


def test_freeze_regenerates_identical_bytes_into_a_folder(tmp_path):
    result = runner.invoke(app, ["maze", "freeze", "--heldout", "rehearsal-7x7-64", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = tmp_path / "rehearsal-7x7-64.json"
    assert written.read_bytes() == (HELDOUT_DIR / "rehearsal-7x7-64.json").read_bytes()
    assert "new set file" in result.stdout
    again = runner.invoke(app, ["maze", "freeze", "--heldout", "rehearsal-7x7-64", "--dir", str(tmp_path)])
    assert "unchanged" in again.stdout
    assert list(json.loads((tmp_path / MANIFEST_NAME).read_text())) == ["rehearsal-7x7-64.json"]
