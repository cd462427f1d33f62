"""Pulling one action tuple out of a model reply."""

from __future__ import annotations

import pytest

from workload.maze.actions import ACTION_STRINGS, STOP, extract_action, parse_action


def test_canonical_strings_are_visgyms():
    assert ACTION_STRINGS == ("('move', 0)", "('move', 1)", "('move', 2)", "('move', 3)", "('stop', 'stop')")
    assert [parse_action(a) for a in ACTION_STRINGS] == [
        ("move", 0),
        ("move", 1),
        ("move", 2),
        ("move", 3),
        ("stop", "stop"),
    ]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("('move', 3)", "('move', 3)"),
        ("I will go down. ('move', 3)", "('move', 3)"),
        ('("move", 1)', '("move", 1)'),
        ("`('stop', 'stop')`", STOP),
        ("```python\n('move', 2)\n```", "('move', 2)"),
        ("(move, 0)", "('move', 0)"),
        ("(  'move' ,  0 )", "(  'move' ,  0 )"),
        ("('move', 7)", "('move', 7)"),  # shape only: Maze2D judges the payload
        ("<observation>I could ('move', 1)</observation><action>('move', 0)</action>", "('move', 0)"),
        ("<action>nothing here</action> but ('move', 2)", "('move', 2)"),
        ("first ('move', 1) then ('move', 2)", "('move', 1)"),
        ("(a, (b, c)) ('move', 1)", "('move', 1)"),
        ("('mark', (0.5, 0.5))", "('mark', (0.5, 0.5))"),
    ],
)
def test_extracts_the_first_tuple(reply, expected):
    assert extract_action(reply) == expected


@pytest.mark.parametrize(
    "reply", ["", "move up", "('move', 0", "(1, 2)", "('move', 0, 1)", "('move')", None, "((((" * 100]
)
def test_no_action_in_reply(reply):
    assert extract_action(reply) is None
    assert parse_action(reply) is None


def test_long_replies_are_scanned_only_up_to_a_bound():
    assert extract_action("x" * 30_000 + "('move', 0)") is None
    assert extract_action("x" * 100 + "('move', 0)") == "('move', 0)"
