"""Telemetry as the Python SDK 0.131 speaks it (kernel-api-0131.md §2.7), against the real server
and Chromium: the opt-in `platform` category and its `platform_api_call`, and `page_crashed`.
The stream's `type` filter is exercised in test_0131_network.py, beside the events it filters.
"""

from __future__ import annotations

from kernel import Kernel

from conftest import wait_for


def events_of(client: Kernel, session_id: str, **query) -> list[dict]:
    return [e.event.model_dump() for e in client.browsers.telemetry.events(session_id, since="10m", limit=1000, **query)]


def test_platform_records_calls_sent_straight_to_the_browser_only_when_asked(client: Kernel) -> None:
    b = client.browsers.create(headless=True, telemetry={"browser": {"control": {"enabled": True}}})
    try:
        assert b.telemetry.browser.platform.enabled is False  # opt-in: not among the defaults
        # 0.131 sends fs calls to the browser's base_url with its token (Kernel's in-VM API).
        client.browsers.fs.create_directory(b.session_id, path="/tmp/before")
        client.browsers.replays.list(b.session_id)  # through /browsers/{id}/...: an API call
        calls = wait_for(lambda: [e for e in events_of(client, b.session_id, category="control")
                                  if e["data"]["operation_id"] == "replays"], what="the replays api_call")
        assert calls[0]["type"] == "api_call"
        assert not events_of(client, b.session_id, category="platform")
        assert not [e for e in events_of(client, b.session_id, category="control")
                    if e["data"]["operation_id"].startswith("fs")], "an in-VM call is not a control-plane call"

        updated = client.browsers.update(b.session_id, telemetry={"browser": {"platform": {"enabled": True}}})
        assert updated.telemetry.browser.platform.enabled is True
        client.browsers.fs.create_directory(b.session_id, path="/tmp/after")
        platform = wait_for(lambda: events_of(client, b.session_id, category="platform"),
                            what="a platform_api_call event")
        assert [e["type"] for e in platform] == ["platform_api_call"], platform
        data = platform[0]["data"]
        assert data["operation_id"] == "fsCreateDirectory" and data["status"] in (200, 204), data
        assert data["request_id"] and data["duration_ms"] >= 0, data
        assert events_of(client, b.session_id, type=["platform_api_call"]) == platform
    finally:
        client.browsers.delete_by_id(b.session_id)


def test_a_renderer_crash_is_page_crashed_while_the_browser_lives(client: Kernel) -> None:
    b = client.browsers.create(headless=True, telemetry={"browser": {"page": {"enabled": True}}})
    try:
        r = client.browsers.playwright.execute(
            b.session_id,
            # CDP's Page.crash kills the renderer; it never answers, so it is not awaited.
            code="await page.goto('data:text/html,<title>doomed</title>');"
                 "const cdp = await context.newCDPSession(page); cdp.send('Page.crash').catch(() => {});"
                 "return 'sent';",
            timeout_sec=60,
        )
        assert r.success is True, r
        crashed = wait_for(lambda: events_of(client, b.session_id, type=["page_crashed"]),
                           what="a page_crashed event")
        assert crashed[0]["category"] == "page", crashed
        data = crashed[0]["data"]
        assert data["target_type"] == "page" and data["target_id"] == r.tab.target_id, crashed
        assert data["url"] == "data:text/html,<title>doomed</title>", crashed
        assert not events_of(client, b.session_id, type=["service_crashed"]), "Chromium itself lives on"
        # ...and it still serves: a new page in the same browser works.
        again = client.browsers.playwright.execute(
            b.session_id, code="const p = await context.newPage(); await p.goto('data:text/html,ok');"
                                "return await p.content();", timeout_sec=60)
        assert again.success is True and "ok" in again.result, again
    finally:
        client.browsers.delete_by_id(b.session_id)
