"""`Admission`, the ingress's bound on requests in the model deployment: plain asyncio, no Serve."""

from __future__ import annotations

import asyncio

import pytest

from workload.serve.app import Admission

SHORT_WAIT_S = 0.05  # a waiter that must time out
LONG_WAIT_S = 30.0  # a waiter that must be granted (or cancelled) long before this


def _run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, LONG_WAIT_S))


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0)


def test_up_to_capacity_at_once_then_first_come_first_served():
    async def scenario():
        admission = Admission(2)
        assert await admission.acquire(SHORT_WAIT_S) and await admission.acquire(SHORT_WAIT_S)
        order: list[str] = []

        async def wait(name: str) -> None:
            assert await admission.acquire(LONG_WAIT_S)
            order.append(name)

        first = asyncio.create_task(wait("first"))
        await _until(lambda: admission.waiting == 1)
        second = asyncio.create_task(wait("second"))
        await _until(lambda: admission.waiting == 2)
        admission.release()
        await first
        admission.release()
        await second
        return order, admission.waiting, admission.free

    assert _run(scenario()) == (["first", "second"], 0, 0)


def test_a_waiter_that_times_out_leaves_the_queue_and_its_slot_goes_to_the_next():
    async def scenario():
        admission = Admission(1)
        assert await admission.acquire(SHORT_WAIT_S)
        timed_out = await admission.acquire(SHORT_WAIT_S)
        waiting_after_timeout = admission.waiting
        admission.release()  # no one waits: the slot is free again, not handed to the gone waiter
        return timed_out, waiting_after_timeout, admission.free, await admission.acquire(SHORT_WAIT_S)

    assert _run(scenario()) == (False, 0, 1, True)


def test_many_timeouts_leave_nothing_queued():
    async def scenario():
        admission = Admission(1)
        await admission.acquire(SHORT_WAIT_S)
        results = await asyncio.gather(*(admission.acquire(SHORT_WAIT_S) for _ in range(50)))
        return results, admission.waiting

    results, waiting = _run(scenario())
    assert not any(results) and waiting == 0


def test_a_cancelled_waiter_leaves_the_queue():
    async def scenario():
        admission = Admission(1)
        await admission.acquire(SHORT_WAIT_S)
        waiter = asyncio.create_task(admission.acquire(LONG_WAIT_S))
        await _until(lambda: admission.waiting == 1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return admission.waiting

    assert _run(scenario()) == 0
