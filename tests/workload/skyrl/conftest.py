"""Fixtures of the cluster-trainer tests: one private Ray head per session."""

from __future__ import annotations

import pytest

from tests.workload.skyrl.ray_head import RayHead, local_ray_head


@pytest.fixture(scope="session")
def skyrl_ray_head() -> RayHead:
    """A Ray head on 127.0.0.1 (free ports, own --temp-dir), stopped by process id afterwards."""
    with local_ray_head() as head:
        yield head
