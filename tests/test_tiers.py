"""Test tiers mean what they say: whatever starts a slow session fixture is marked slow."""

from __future__ import annotations

from tests.conftest import SLOW_FIXTURES


def test_every_collected_test_using_a_slow_fixture_is_marked_slow(request):
    unmarked = [
        item.nodeid
        for item in request.session.items
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("slow") is None
    ]
    assert unmarked == []

