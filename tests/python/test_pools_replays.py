"""Browser pools (acquire/release, the long-poll's null on timeout) and replays of a headful
session (start, stop, list, MP4 download) through the Python SDK (sync)."""

from __future__ import annotations

import time

import kernel
from kernel import Kernel

from conftest import wait_for


def test_pool_acquire_release(client: Kernel) -> None:
    pool = client.browser_pools.create(name="py-pool", size=1, headless=True, fill_rate_per_minute=600)
    try:
        assert client.browser_pools.retrieve("py-pool").id == pool.id
        wait_for(lambda: client.browser_pools.retrieve(pool.id).available_count == 1, timeout=90, what="the pool to fill")
        leased = client.browser_pools.acquire(pool.id, name="py-leased", tags={"from": "pool"})
        assert leased is not None and leased.session_id
        assert client.browsers.retrieve("py-leased").session_id == leased.session_id
        # The pool is empty now: a short acquire answers null (None), not an error.
        assert client.browser_pools.acquire(pool.id, acquire_timeout_seconds=1) is None
        assert client.browser_pools.release(pool.id, session_id=leased.session_id, reuse=True) is None
        again = client.browser_pools.acquire(pool.id, acquire_timeout_seconds=30)
        assert again is not None and again.session_id == leased.session_id
        client.browser_pools.release(pool.id, session_id=again.session_id, reuse=False)
        assert pool.id in {p.id for p in client.browser_pools.list()}
    finally:
        client.browser_pools.delete(pool.id, force=True)


def test_replays_of_a_headful_session(client: Kernel) -> None:
    s = client.browsers.create(headless=False, viewport={"width": 1024, "height": 768})
    try:
        replay = client.browsers.replays.start(s.session_id, framerate=10)
        assert replay.replay_id
        client.browsers.computer.move_mouse(s.session_id, x=300, y=200)
        time.sleep(1.5)
        assert client.browsers.replays.stop(replay.replay_id, id_or_name=s.session_id) is None
        listed = client.browsers.replays.list(s.session_id)
        assert [r.replay_id for r in listed] == [replay.replay_id]
        assert listed[0].finished_at is not None
        mp4 = client.browsers.replays.download(replay.replay_id, id_or_name=s.session_id).read()
        assert mp4[4:8] == b"ftyp"
    finally:
        client.browsers.delete_by_id(s.session_id)
    # A headless session cannot be recorded: 400 through the SDK's BadRequestError.
    try:
        h = client.browsers.create(headless=True)
        try:
            client.browsers.replays.start(h.session_id)
            raise AssertionError("a headless replay started")
        except kernel.BadRequestError:
            pass
    finally:
        client.browsers.delete_by_id(h.session_id)
