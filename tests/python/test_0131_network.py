"""`network.allowed_hosts` and `proxy` (kernel-api-0131.md §2.1–2.2) through the official Python SDK 0.131
against the real server: an egress allowlist a real Chromium is held to from its first request, in
its forwarder (navigations, fetch() and WebSockets); refusals as Kernel's egress proxy answers them
(403, `X-Kernel-Proxy-Error: network_policy_denied`); the entry grammar's refusals; and PATCH
replacing and lifting the list under `expected_allowlist_revision` and `mutation_id`.

The origin is a small HTTP and WebSocket server on a host port the instances may reach. Inside
the sandbox it is `localhost` (a name the list can allow) and `127.0.0.1` (a loopback address no
list may name), so one server is both an allowed and a refused destination. One browser at once."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import uuid
from typing import Iterator

import httpx
import pytest

import kernel
from kernel import Kernel

from conftest import ALLOWED_PORTS, reply, serving, wait_for

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3


class _Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    paths: list[str] = []  # every path asked for, in order

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        _Origin.paths.append(self.path)
        if self.headers.get("upgrade", "").lower() == "websocket":
            accept = base64.b64encode(
                hashlib.sha1((self.headers["sec-websocket-key"] + WS_GUID).encode()).digest()
            ).decode()
            self.send_response(101)
            self.send_header("upgrade", "websocket")
            self.send_header("connection", "Upgrade")
            self.send_header("sec-websocket-accept", accept)
            self.end_headers()
            self.wfile.write(b"\x81\x05hello")  # one unmasked text frame
            self.wfile.flush()
            self.close_connection = True
            return
        body = f"<!doctype html><title>origin {self.path}</title><p>ok</p>".encode()
        reply(self, 200, body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin_port() -> Iterator[int]:
    with serving(_Origin, range(ALLOWED_PORTS[0] + 120, ALLOWED_PORTS[0] + 150)) as port:
        yield port


# What the page can reach, read in the browser: a navigation's status and proxy-error header, a
# same-origin fetch(), and a WebSocket's first message (or its failure).
PROBE = """
const out = {};
for (const [name, url] of Object.entries(args.pages)) {
  try {
    const r = await page.goto(url);
    out[name] = { status: r.status(), proxyError: r.headers()['x-kernel-proxy-error'] || null };
  } catch (e) {
    out[name] = { error: String(e.message).split('\\n')[0] };
  }
}
// From the allowed page: the refusal page above forbids scripts any connection (its CSP).
await page.goto(args.pages.allowed).catch(() => {});
out.fetch = await page.evaluate(async () => (await fetch('/fetched')).status).catch((e) => String(e));
for (const [name, url] of Object.entries(args.sockets)) {
  out[name] = await page.evaluate((u) => new Promise((resolve) => {
    const ws = new WebSocket(u);
    ws.onmessage = (m) => { resolve(m.data); ws.close(); };
    ws.onerror = () => resolve('failed');
  }), url);
}
return out;
"""


def probe(client: Kernel, session_id: str, port: int) -> dict:
    code = "const args = " + json.dumps(
        {
            "pages": {
                "allowed": f"http://localhost:{port}/allowed",
                "refused": f"http://127.0.0.1:{port}/refused",
            },
            "sockets": {"ws_allowed": f"ws://localhost:{port}/ws", "ws_refused": f"ws://127.0.0.1:{port}/ws"},
        }
    ) + ";\n" + PROBE
    r = client.browsers.playwright.execute(session_id, code=code, timeout_sec=60)
    assert r.success is True, r
    return r.result


def test_allowlist_holds_from_the_first_request_and_patch_replaces_and_lifts_it(client: Kernel, origin_port: int) -> None:
    start = f"http://localhost:{origin_port}/start"
    b = client.browsers.create(
        headless=True,
        network={"allowed_hosts": ["LOCALHOST"]},
        start_url=start,
        telemetry={"browser": {"network": {}}},
    )
    try:
        assert b.network is not None
        assert b.network.allowed_hosts == ["localhost"]
        first = b.network.allowlist_state.revision
        assert first

        seen = probe(client, b.session_id, origin_port)
        assert seen["allowed"] == {"status": 200, "proxyError": None}, seen
        assert seen["refused"] == {"status": 403, "proxyError": "network_policy_denied"}, seen
        assert seen["fetch"] == 200, seen
        assert seen["ws_allowed"] == "hello", seen
        assert seen["ws_refused"] == "failed", seen

        # Telemetry names each refusal: the page's and the WebSocket's (whose refused tunnel
        # Chromium reports only as a frame error).
        def refusals(url: str) -> list[dict]:
            events = [e.event.model_dump() for e in client.browsers.telemetry.events(
                b.session_id, since="10m", limit=1000, category="network")]
            found = [e["data"] for e in events if e["type"] == "proxy_error"]
            return [d for d in found if d.get("url") == url]

        refused_events = wait_for(lambda: refusals(f"http://127.0.0.1:{origin_port}/refused"),
                                  what="a proxy_error event for the refused page")
        assert [(d["code"], d["status"]) for d in refused_events] == [("network_policy_denied", 403)], refused_events
        socket_events = wait_for(lambda: refusals(f"ws://127.0.0.1:{origin_port}/ws"),
                                 what="a proxy_error event for the refused WebSocket")
        assert [(d["code"], d["status"], d["resource_type"]) for d in socket_events] == [
            ("network_policy_denied", 403, "WebSocket")
        ], socket_events
        # 0.131's type filter (ANDed with the category): only those events.
        typed = [e.event for e in client.browsers.telemetry.events(
            b.session_id, since="10m", limit=1000, category="network", type=["proxy_error"])]
        assert typed and {e.type for e in typed} == {"proxy_error"}, typed
        both = [e.event for e in client.browsers.telemetry.events(
            b.session_id, since="10m", limit=1000, type=["proxy_error", "network_request"])]
        assert {e.type for e in both} == {"proxy_error", "network_request"}, {e.type for e in both}
        with pytest.raises(kernel.BadRequestError) as bad_type:
            client.browsers.telemetry.events(b.session_id, type=["Proxy-Error"])
        assert "type" in str(bad_type.value.body)
        # On the stream too: through the SDK, only those types arrive...
        with client.browsers.telemetry.stream(b.session_id, type=["proxy_error"], replay="all") as live:
            streamed = next(iter(live))
        assert streamed.event.type == "proxy_error", streamed
        # ...and what the filter skipped is told by an id-only frame with the latest skipped seq,
        # so a reconnect's Last-Event-ID resumes past it. A plain GET gets what is held, then the end.
        held = httpx.get(f"{str(client.base_url).rstrip('/')}/browsers/{b.session_id}/telemetry/stream",
                         params={"type": "proxy_error", "replay": "all"},
                         headers={"Authorization": f"Bearer {client.api_key}"}, timeout=30)
        assert held.status_code == 200, held.text
        frames = [f for f in held.text.split("\n\n") if f.strip() and not f.startswith(":")]
        sent = [f for f in frames if "\ndata: " in f]
        assert sent and all(json.loads(f.split("\ndata: ", 1)[1])["event"]["type"] == "proxy_error" for f in sent), frames
        id_only = [f for f in frames if "data:" not in f]
        assert len(id_only) == 1 and frames[-1] == id_only[0], frames
        sent_ids = [int(f.split("\n")[0].removeprefix("id: ")) for f in sent]
        assert int(id_only[0].removeprefix("id: ")) > max(sent_ids), frames
        with pytest.raises(kernel.BadRequestError):
            client.browsers.telemetry.stream(b.session_id, type=["Proxy-Error"])

        got = client.browsers.retrieve(b.session_id)
        assert got.network.allowed_hosts == ["localhost"]
        assert got.network.allowlist_state.revision == first

        # Replaced, conditionally: localhost is refused from now on, without a restart.
        mutation = str(uuid.uuid4())
        replaced = client.browsers.update(
            b.session_id,
            network={"allowed_hosts": ["example.com"], "expected_allowlist_revision": first, "mutation_id": mutation},
        )
        second = replaced.network.allowlist_state.revision
        assert second != first
        assert replaced.network.allowed_hosts == ["example.com"]
        assert replaced.network.allowlist_state.base_revision == first
        assert replaced.network.allowlist_state.mutation_id == mutation
        seen = probe(client, b.session_id, origin_port)
        assert seen["allowed"] == {"status": 403, "proxyError": "network_policy_denied"}, seen
        assert seen["ws_allowed"] == "failed", seen

        # The same change retried (its answer lost) is a no-op; another on the old revision is stale.
        again = client.browsers.update(
            b.session_id,
            network={"allowed_hosts": ["example.com"], "expected_allowlist_revision": first, "mutation_id": mutation},
        )
        assert again.network.allowlist_state.revision == second
        with pytest.raises(kernel.ConflictError) as stale:
            client.browsers.update(
                b.session_id,
                network={"allowed_hosts": ["example.org"], "expected_allowlist_revision": first, "mutation_id": "other"},
            )
        assert stale.value.body["code"] == "stale_network"
        assert client.browsers.retrieve(b.session_id).network.allowed_hosts == ["example.com"]

        # Lifted: everything is reached again; the state stays for the next conditional change.
        lifted = client.browsers.update(b.session_id, network={"allowed_hosts": None, "expected_allowlist_revision": second})
        assert lifted.network.allowed_hosts is None
        assert lifted.network.allowlist_state.base_revision == second
        seen = probe(client, b.session_id, origin_port)
        assert seen["allowed"]["status"] == 200 and seen["refused"]["status"] == 200, seen
        assert seen["ws_refused"] == "hello", seen
    finally:
        client.browsers.delete_by_id(b.session_id)


PAGES = "return context.pages().map((p) => p.url());"


def test_patch_start_url_opens_after_the_update_and_must_be_allowed(client: Kernel, origin_port: int) -> None:
    b = client.browsers.create(headless=True, network={"allowed_hosts": ["localhost"]})
    try:
        # Opened once the update is made, in place of the tabs the browser had.
        url = f"http://localhost:{origin_port}/patched-{uuid.uuid4().hex[:8]}"
        path = url.split(str(origin_port), 1)[1]
        updated = client.browsers.update(b.session_id, name="py-start-url", start_url=url)
        assert updated.name == "py-start-url"
        wait_for(lambda: path in _Origin.paths, what="the start_url of the update asked for")
        pages = wait_for(
            lambda: (lambda r: r.result if r.success and r.result == [url] else None)(
                client.browsers.playwright.execute(b.session_id, code=PAGES)
            ),
            what="one tab, at the start_url",
        )
        assert pages == [url], pages

        # One the allowlist refuses is refused before anything changes (as on create).
        with pytest.raises(kernel.BadRequestError) as e:
            client.browsers.update(b.session_id, name="never", start_url=f"http://127.0.0.1:{origin_port}/refused")
        assert "start_url" in str(e.value.body), e.value.body
        assert client.browsers.retrieve(b.session_id).name == "py-start-url"
        # Judged by the list the same update leaves: lifting it lets the loopback address open.
        lifted = f"http://127.0.0.1:{origin_port}/after-lift"
        client.browsers.update(b.session_id, network={"allowed_hosts": None}, start_url=lifted)
        wait_for(lambda: "/after-lift" in _Origin.paths, what="the start_url after the list was lifted")

        # "" leaves the tabs as they are.
        def tabs() -> list[str]:
            r = client.browsers.playwright.execute(b.session_id, code=PAGES)
            assert r.success, r
            return r.result

        before = wait_for(lambda: (lambda t: t if lifted in t else None)(tabs()), what="the lifted start_url's tab")
        asked = len(_Origin.paths)
        client.browsers.update(b.session_id, start_url="")
        assert tabs() == before
        assert len(_Origin.paths) == asked
    finally:
        client.browsers.delete_by_id(b.session_id)


def test_pool_network_reaches_its_browsers_and_changes_under_expected_network(client: Kernel, origin_port: int) -> None:
    pool = client.browser_pools.create(
        size=1, headless=True, fill_rate_per_minute=6000, network={"allowed_hosts": ["LOCALHOST"]}
    )
    try:
        # Checked and lower-cased as on a browser; pools have no allowlist_state.
        assert pool.browser_pool_config.network.allowed_hosts == ["localhost"]
        assert pool.browser_pool_config.network.allowlist_state is None
        b = client.browser_pools.acquire(pool.id, acquire_timeout_seconds=45)
        assert b.network.allowed_hosts == ["localhost"] and b.network.allowlist_state.revision
        seen = probe(client, b.session_id, origin_port)
        assert seen["allowed"]["status"] == 200 and seen["refused"]["status"] == 403, seen

        # A lessee's own change is not handed on: the released browser is replaced.
        client.browsers.update(b.session_id, network={"allowed_hosts": ["example.com"]})
        client.browser_pools.release(pool.id, session_id=b.session_id)
        again = client.browser_pools.acquire(pool.id, acquire_timeout_seconds=45)
        assert again.session_id != b.session_id
        assert again.network.allowed_hosts == ["localhost"]
        client.browser_pools.release(pool.id, session_id=again.session_id)

        # A change based on a network the pool no longer has fails whole.
        with pytest.raises(kernel.ConflictError) as stale:
            client.browser_pools.update(pool.id, size=2, network={"allowed_hosts": ["example.com"]}, expected_network={})
        assert stale.value.body["code"] == "stale_network"
        unchanged = client.browser_pools.retrieve(pool.id)
        assert unchanged.browser_pool_config.size == 1
        assert unchanged.browser_pool_config.network.allowed_hosts == ["localhost"]

        # Based on the one last read: applied, and the idle browser is built again on it.
        updated = client.browser_pools.update(
            pool.id, network={"allowed_hosts": ["example.com"]}, expected_network={"allowed_hosts": ["localhost"]}
        )
        assert updated.browser_pool_config.network.allowed_hosts == ["example.com"]
        fresh = client.browser_pools.acquire(pool.id, acquire_timeout_seconds=45)
        assert fresh.session_id not in (b.session_id, again.session_id)
        assert fresh.network.allowed_hosts == ["example.com"]
        seen = probe(client, fresh.session_id, origin_port)
        assert seen["allowed"] == {"status": 403, "proxyError": "network_policy_denied"}, seen
        client.browser_pools.release(pool.id, session_id=fresh.session_id)

        # {} removes it.
        cleared = client.browser_pools.update(pool.id, network={}, expected_network={"allowed_hosts": ["example.com"]})
        assert cleared.browser_pool_config.network is None
        # Refused as on a browser, naming the entry.
        with pytest.raises(kernel.BadRequestError) as bad:
            client.browser_pools.update(pool.id, network={"allowed_hosts": ["*.com"]})
        assert "network.allowed_hosts[0]" in str(bad.value.body)
    finally:
        client.browser_pools.delete(pool.id, force=True)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("*.com", "public suffix"),
        ("10.0.0.0/8", "private"),
        ("127.0.0.1", "loopback"),
        ("https://example.com", "scheme"),
        ("example.com:443", "port"),
        ("example.com/path", "path"),
        ("203.0.113.1/24", "canonical"),
    ],
)
def test_entries_the_grammar_refuses(client: Kernel, entry: str, why: str) -> None:
    with pytest.raises(kernel.BadRequestError) as e:
        client.browsers.create(headless=True, network={"allowed_hosts": ["example.com", entry]})
    assert why in str(e.value.body), e.value.body
    assert "network.allowed_hosts[1]" in str(e.value.body), e.value.body


def test_refusals_a_user_meets(client: Kernel) -> None:
    # A start URL the list does not allow.
    with pytest.raises(kernel.BadRequestError) as e:
        client.browsers.create(headless=True, network={"allowed_hosts": ["example.com"]}, start_url="https://example.org/")
    assert "start_url" in str(e.value.body)
    # An empty list would refuse everything: leave the field out instead.
    with pytest.raises(kernel.BadRequestError):
        client.browsers.create(headless=True, network={"allowed_hosts": []})
    # Private hosts are private: a public address is refused, naming the entry.
    with pytest.raises(kernel.BadRequestError) as e:
        client.browsers.create(headless=True, network={"private_hosts": ["*.corp.example", "203.0.113.7"]})
    assert "network.private_hosts[1]" in str(e.value.body)
    # An allowlist is never added to a browser created without one.
    b = client.browsers.create(headless=True)
    try:
        assert b.network is None
        with pytest.raises(kernel.BadRequestError) as e:
            client.browsers.update(b.session_id, network={"allowed_hosts": ["example.com"]})
        assert "created without an allowlist" in str(e.value.body)
    finally:
        client.browsers.delete_by_id(b.session_id)


def test_proxy_selector_by_name_id_and_mode(client: Kernel) -> None:
    """`proxy` (BrowserProxyConfig) selects the same project proxies as `proxy_id`, by id or by name,
    or none (`mode`); the browser object answers the resolved egress. That traffic then goes the
    selected way is proxy_id's path, which tests/e2e/proxies.test.mjs drives through tinyproxy."""
    name = f"py-0131-{uuid.uuid4().hex[:8]}"
    proxy = client.proxies.create(type="custom", protocol="http", name=name, config={"host": "127.0.0.1", "port": 9})
    try:
        b = client.browsers.create(headless=True, proxy={"name": name})
        try:
            assert b.proxy_id == proxy.id
            assert b.proxy.id == proxy.id
            direct = client.browsers.update(b.session_id, proxy={"mode": "direct"})
            assert direct.proxy_id is None and direct.proxy.mode == "direct" and direct.proxy.id is None
            back = client.browsers.update(b.session_id, proxy={"id": proxy.id})
            assert back.proxy_id == proxy.id and back.proxy.id == proxy.id
            assert client.browsers.retrieve(b.session_id).proxy.id == proxy.id
        finally:
            client.browsers.delete_by_id(b.session_id)
        with pytest.raises(kernel.NotFoundError):
            client.browsers.create(headless=True, proxy={"name": "no-such-proxy"})
        with pytest.raises(kernel.BadRequestError) as e:
            client.browsers.create(headless=True, proxy={"id": proxy.id}, proxy_id=proxy.id)
        assert "proxy" in str(e.value.body)
        with pytest.raises(kernel.BadRequestError):
            client.browsers.create(headless=True, proxy={})
    finally:
        client.proxies.delete(proxy.id)
