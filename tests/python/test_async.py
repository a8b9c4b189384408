"""The async client (AsyncKernel) on the same server: create, async auto-paging, fs, process
exec, SSE stream (logs), screenshot, delete, and its error classes."""

from __future__ import annotations

import base64

import pytest

import kernel
from kernel import AsyncKernel


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_async_core_flow(server) -> None:
    # A client per test: its connection pool lives on this test's event loop.
    async with AsyncKernel(api_key=server.api_key, base_url=server.base_url, timeout=120, max_retries=0) as client:
        s = await client.browsers.create(headless=True, name="py-async", tags={"async": "yes"})
        try:
            assert (await client.browsers.retrieve("py-async")).session_id == s.session_id
            ids = [b.session_id async for b in client.browsers.list(limit=1, tags={"async": "yes"})]
            assert ids == [s.session_id]

            await client.browsers.fs.write_file(s.session_id, contents=b"async", path="/home/kernel/async.txt")
            got = await client.browsers.fs.read_file(s.session_id, path="/home/kernel/async.txt")
            assert await got.read() == b"async"

            r = await client.browsers.process.exec(s.session_id, command="echo", args=["from-async"])
            assert r.exit_code == 0 and base64.b64decode(r.stdout_b64 or "") == b"from-async\n"

            stream = await client.browsers.logs.stream(s.session_id, source="path", path="/home/kernel/async.txt", follow=False)
            assert [e.message async for e in stream] == ["async"]

            png = await client.browsers.computer.capture_screenshot(s.session_id)
            assert (await png.read())[:4] == b"\x89PNG"
        finally:
            await client.browsers.delete_by_id(s.session_id)
        with pytest.raises(kernel.NotFoundError):
            await client.browsers.retrieve(s.session_id)
    bad = AsyncKernel(api_key="sk_wrong", base_url=server.base_url, max_retries=0)
    with pytest.raises(kernel.AuthenticationError):
        await bad.browsers.list()
    await bad.close()
