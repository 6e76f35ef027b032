"""lifecycle.py, the one request life the language server, serve-api and the backends share: a newer
request for a key supersedes the older one, the debounce, the race with what ends a request, and
the deadline. Events only, no sleeps: the clocks here are asyncio's own timeouts."""

from __future__ import annotations

import asyncio
import threading

import pytest

from diffusion_lsp.lifecycle import Latest, Stopped, deadline, race, tickets
from diffusion_lsp.protocol.failure import BackendError, Failure, Stop


def test_a_newer_request_for_a_key_supersedes_the_older_and_only_that_one():
    latest = Latest(lambda key: threading.Event())
    with latest.take("a.py") as first, latest.take("b.py") as other:
        with latest.take("a.py") as second:
            assert first.is_set() and not second.is_set() and not other.is_set()
        with latest.take("a.py") as third:  # the second let its key go: nothing to supersede
            assert not third.is_set()


def test_an_empty_key_supersedes_nothing_and_is_never_superseded():
    latest = Latest(lambda key: threading.Event())
    with latest.take("") as one, latest.take("") as two:
        assert not one.is_set() and not two.is_set()


def test_claim_and_release_keep_a_key_for_a_request_whose_life_ends_elsewhere():
    told = []
    latest = Latest(supersede=told.append)
    latest.claim((1, "a.py"), "job 1")
    latest.claim((2, "a.py"), "job 2")  # another connection: its own key
    latest.claim((1, "a.py"), "job 3")
    assert told == ["job 1"]
    latest.release((1, "a.py"), "job 1")  # not the holder any more: the key stays job 3's
    latest.claim((1, "a.py"), "job 4")
    assert told == ["job 1", "job 3"]
    latest.supersede_all()
    assert told[:2] == ["job 1", "job 3"] and sorted(told[2:]) == ["job 2", "job 4"]
    latest.claim((1, "a.py"), "job 5")  # the keys are free again
    assert len(told) == 4


def test_the_debounce_says_whether_typing_paused_or_a_newer_request_came():
    async def go():
        queue = tickets()
        with queue.take("a.py") as older:
            assert await older.debounce(0.01) is True
            waiting = asyncio.ensure_future(older.debounce(60))
            await asyncio.sleep(0)  # let it start waiting
            with queue.take("a.py"):
                assert await waiting is False  # at once, not after 60 s
    asyncio.run(asyncio.wait_for(go(), 10))


def test_a_superseded_tickets_work_is_cancelled_and_dropped():
    async def go():
        queue, cancelled = tickets(), asyncio.Event()

        async def work():
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with queue.take("a.py") as older:
            running = asyncio.ensure_future(older.run(work()))
            await asyncio.sleep(0)
            with queue.take("a.py"):
                with pytest.raises(BackendError) as e:
                    await running
        assert e.value.kind is Failure.DROPPED and cancelled.is_set()
    asyncio.run(asyncio.wait_for(go(), 10))


def test_an_answer_that_came_in_the_turn_its_ticket_was_superseded_is_never_returned():
    """A backend that answers anyway, in the same turn as the newer request: the race saw the work done
    first, and the ticket still drops it (the completion's old check after its fill, now the ticket's)."""
    async def go():
        queue = tickets()
        with queue.take("a.py") as older:
            async def answers_as_it_is_superseded():
                with queue.take("a.py"):
                    return "too late"
            with pytest.raises(BackendError) as e:
                await older.run(answers_as_it_is_superseded())
            assert (e.value.kind, e.value.stop, str(e.value)) == (Failure.DROPPED, Stop.SUPERSEDED,
                                                                  "superseded by a newer request")
        with queue.take("b.py") as other:  # not superseded: its work's answer
            assert await other.run(asyncio.sleep(0, "in time")) == "in time"
    asyncio.run(asyncio.wait_for(go(), 10))


def test_the_race_is_lost_to_a_stop_and_won_by_the_work():
    async def go():
        stop = asyncio.Event()
        stop.set()
        with pytest.raises(Stopped):
            await race(asyncio.Event().wait(), stop.wait())
        assert await race(asyncio.sleep(0, "answer"), asyncio.Event().wait()) == "answer"
    asyncio.run(asyncio.wait_for(go(), 10))


def test_past_its_deadline_a_request_is_a_timeout_with_its_message_and_is_told():
    missed = []

    async def go():
        with pytest.raises(BackendError) as e:
            async with deadline(0.01, "no fill within 0.01 s", lambda: missed.append(1)):
                await asyncio.Event().wait()
        assert e.value.kind is Failure.TIMEOUT and str(e.value) == "no fill within 0.01 s"
        async with deadline(10, "never said"):
            assert await asyncio.sleep(0, "in time") == "in time"
        with pytest.raises(StopAsyncIteration):  # the body's own exceptions pass unchanged (a stream's end)
            async with deadline(10, "never said"):
                raise StopAsyncIteration
    asyncio.run(asyncio.wait_for(go(), 10))
    assert missed == [1]
