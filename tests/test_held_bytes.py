"""The bound on request bodies held at once (app.webhook.server.HeldBytes): first come, first served;
a request larger than the bound runs alone; a cancelled waiter never leaks its share."""

from __future__ import annotations

import asyncio

from app.webhook.server import HeldBytes


def test_requests_wait_their_turn_and_go_in_order() -> None:
    async def run() -> list[str]:
        held = HeldBytes(10)
        order: list[str] = []
        await held.acquire(6)
        assert not held.fits(6) and held.fits(4)

        async def later(name: str, size: int) -> None:
            await held.acquire(size)
            order.append(name)

        a = asyncio.ensure_future(later("a", 6))
        b = asyncio.ensure_future(later("b", 1))  # fits, but waits behind a: first come, first served
        await asyncio.sleep(0)
        assert order == [] and held.held == 6
        held.release(6)
        await asyncio.gather(a, b)
        assert held.held == 7
        return order

    assert asyncio.run(run()) == ["a", "b"]


def test_a_body_larger_than_the_bound_runs_alone() -> None:
    async def run() -> None:
        held = HeldBytes(10)
        await held.acquire(50)  # nothing held: it goes
        waiter = asyncio.ensure_future(held.acquire(1))
        await asyncio.sleep(0)
        assert not waiter.done()
        held.release(50)
        await waiter
        assert held.held == 1

    asyncio.run(run())


def test_a_cancelled_waiter_gives_back_nothing_it_did_not_get() -> None:
    async def run() -> None:
        held = HeldBytes(10)
        await held.acquire(10)
        gone = asyncio.ensure_future(held.acquire(5))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        held.release(10)
        assert held.held == 0 and not held.waiting
        await held.acquire(10)
        assert held.held == 10

    asyncio.run(run())
