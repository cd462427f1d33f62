"""Report lines and the held-out table."""

from __future__ import annotations

from tests import docs
from workload.evaluate.report import format_report, heldout_markdown, heldout_rows
from workload.maze.heldout import load_set
from workload.maze.metrics import Episode, build_report


def test_heldout_table_rows():
    easy, rehearsal = heldout_rows([load_set("easy-64"), load_set("rehearsal-7x7-64")])
    assert easy == {
        "set": "easy-64",
        "size": 9,
        "mazes": 64,
        "shortest_paths": {12: 50, 16: 14},
        "ceiling_15": 50,
        "ceiling_20": 64,
    }
    assert rehearsal["size"] == 7 and sum(rehearsal["shortest_paths"].values()) == 64
    markdown = heldout_markdown([load_set("easy-64")])
    assert "| `easy-64` | 9x9 | 64 | 12: 50, 16: 14 | 50/64 | 64/64 |" in markdown


def test_format_report_mentions_strict_rate_interval_and_ceiling():
    report = build_report(
        [Episode(seed=0, solved=True, turns=13, reward=1.0, shortest_path_len=12)],
        max_turns=15,
        set_name="easy-64",
    )
    text = format_report(report)
    assert (
        "strict pass@1: 1/1 = 100.0%" in text and "95% CI" in text and "solvable within the cap: 1/1" in text
    )


def test_the_maze_page_shows_the_current_heldout_table():
    table = heldout_markdown([load_set("easy-64"), load_set("rehearsal-7x7-64")])
    assert table in docs.page("maze.md")
