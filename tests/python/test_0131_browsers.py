"""What the Python SDK 0.131 added that this slice of issue 45 serves, through the official SDK
against the real server: `GET /auth/context`, `GET /org/entitlements`, and the browser's
`location` (read back from a real page), `memory` and `region` (kernel-api-0131.md §1J, §1K, §2.1,
§2.2). At most two browsers are alive at once; each test makes and deletes its own."""

from __future__ import annotations

import re
import typing

import pytest

import kernel
from kernel import Kernel
from kernel.types.browser_memory import BrowserMemory

MEMORY_SIZES = set(typing.get_args(BrowserMemory))

# What a page reports, in the page the browser opened and in a tab opened after it.
READ_LOCATION = """
const read = () => ({ tz: Intl.DateTimeFormat().resolvedOptions().timeZone, lang: navigator.language,
                      langs: navigator.languages });
const fresh = await context.newPage();
await fresh.goto('about:blank');
const seen = { first: await page.evaluate(read), tab: await fresh.evaluate(read) };
await fresh.close();
return seen;
"""


def page_location(client: Kernel, session_id: str) -> dict:
    r = client.browsers.playwright.execute(session_id, code=READ_LOCATION)
    assert r.success is True, r
    assert r.result["first"] == r.result["tab"], r.result
    return r.result["first"]


def assert_wire_fields(b) -> None:
    """memory and region are required in every browser object of 0.131."""
    assert b.region == "us-east"
    assert b.memory in MEMORY_SIZES, b.memory
    assert b.location is not None


def test_auth_context_org_wide_scoped_and_project_header(server, client: Kernel) -> None:
    ctx = client.auth.context.retrieve()
    assert ctx.principal.type == "api_key" and ctx.principal.id.startswith("key_")
    assert ctx.authentication.method == "api_key" and ctx.authentication.source == "api_key"
    assert ctx.authentication.credential_id == ctx.principal.id
    assert ctx.organization.id.startswith("org_")
    # An org-wide key, no project chosen: both scopes are the organisation.
    assert ctx.authorization.credential_scope.project_id is None
    assert ctx.authorization.effective_scope.project_id is None

    project = client.projects.create(name="py-0131-ctx")
    try:
        chosen = Kernel(api_key=server.api_key, base_url=server.base_url, project_id=project.id, max_retries=0)
        c = chosen.auth.context.retrieve()
        assert c.authorization.credential_scope.project_id is None
        assert c.authorization.effective_scope.project_id == project.id

        made = client.api_keys.create(name="py-0131-scoped", project_id=project.id)
        scoped = Kernel(api_key=made.key, base_url=server.base_url, max_retries=0)
        s = scoped.auth.context.retrieve()
        assert s.principal.id == made.id and s.authentication.credential_id == made.id
        assert s.organization.id == ctx.organization.id
        assert s.authorization.credential_scope.project_id == project.id
        assert s.authorization.effective_scope.project_id == project.id
        client.api_keys.delete(made.id)
        with pytest.raises(kernel.AuthenticationError):
            scoped.auth.context.retrieve()
    finally:
        client.projects.delete(project.id)


def test_entitlements_follow_the_plugins_and_switches(server, client: Kernel) -> None:
    started = set(re.findall(r"plugin (\w+) \S+ started", server.output()))
    assert "browsers" in started and "org" in started, started
    e = client.organization.entitlements.retrieve()
    assert (e.plan.id, e.plan.effective_id, e.plan.is_trialing, e.plan.status) == (
        "ENTERPRISE", "ENTERPRISE", False, "ACTIVE")
    f = e.features
    assert f.browser_pools.enabled is True
    for feature, plugin in [(f.browser_extensions, "extensions"), (f.browser_replays, "replays"),
                            (f.credentials, "credentials"), (f.credential_providers, "credentials"),
                            (f.custom_proxies, "proxies"), (f.file_io, "fs"), (f.managed_auth, "managed_auth"),
                            (f.profiles, "profiles"), (f.proxy_bypass_hosts, "proxies"), (f.vaults, "vaults")]:
        assert feature.enabled is (plugin in started), (plugin, feature)
    # Not served by Hangar: never claimed.
    assert (f.gpu.enabled, f.search.enabled) == (False, False)
    assert f.managed_auth.health_check_interval_min_seconds == 300
    assert f.managed_auth.health_check_interval_max_seconds == 86400
    # The operator's limit (browsers.max_browsers_per_project, default 50), as GET /org/limits says.
    assert e.limits.max_concurrent_browsers == 50 == client.organization.limits.retrieve().max_concurrent_sessions

    # A feature the administrator switched off for a project is off in that project's answer.
    project = client.projects.create(name="py-0131-ent")
    try:
        server.admin("entitlement", project.id, "extensions", "off")
        other = Kernel(api_key=server.api_key, base_url=server.base_url, project_id=project.id, max_retries=0)
        assert other.organization.entitlements.retrieve().features.browser_extensions.enabled is False
        assert client.organization.entitlements.retrieve().features.browser_extensions.enabled is ("extensions" in started)
    finally:
        client.projects.delete(project.id)


def test_location_applies_to_every_tab_and_patch_sets_and_clears(client: Kernel) -> None:
    b = client.browsers.create(headless=True, timeout_seconds=120, region="us-east", memory="2GiB",
                               location={"timezone": "Asia/Tokyo", "locale": "fr-fr"})
    try:
        assert_wire_fields(b)
        # Its own size, not the node's 4096 MiB: the server reads it back from the instance's cgroup.
        assert b.memory == "2GiB" and client.browsers.retrieve(b.session_id).memory == "2GiB"
        loc = b.location
        assert (loc.timezone, loc.timezone_source, loc.locale, loc.locale_source) == (
            "Asia/Tokyo", "override", "fr-FR", "override")
        seen = page_location(client, b.session_id)
        assert seen["tz"] == "Asia/Tokyo" and seen["lang"] == "fr-FR" and seen["langs"][0] == "fr-FR", seen

        # Every browser object carries them: get, list, and the list's region filter.
        got = client.browsers.retrieve(b.session_id)
        assert_wire_fields(got)
        assert got.location.timezone == "Asia/Tokyo"
        listed = {x.session_id: x for x in client.browsers.list(region="us-east")}
        assert b.session_id in listed
        assert_wire_fields(listed[b.session_id])
        assert b.session_id not in {x.session_id for x in client.browsers.list(region="eu-west")}

        # null clears one override (back to the default), a string sets the other.
        u = client.browsers.update(b.session_id, location={"timezone": None, "locale": "de-DE"})
        assert_wire_fields(u)
        assert (u.location.timezone, u.location.timezone_source) == ("UTC", "default")
        assert (u.location.locale, u.location.locale_source) == ("de-DE", "override")
        seen = page_location(client, b.session_id)
        assert seen["tz"] == "UTC" and seen["lang"] == "de-DE", seen
        # An update without location leaves it as it is.
        assert client.browsers.update(b.session_id, tags={"k": "v"}).location.locale == "de-DE"

        # Both cleared: the defaults are what the page sees (Chromium keeps accepted languages in
        # its preferences, so the default must be passed, not only the override left out).
        c = client.browsers.update(b.session_id, location={"locale": None})
        assert (c.location.timezone_source, c.location.locale_source) == ("default", "default")
        seen = page_location(client, b.session_id)
        assert (seen["tz"], seen["lang"]) == (c.location.timezone, c.location.locale) == ("UTC", "en-US"), seen
    finally:
        client.browsers.delete_by_id(b.session_id)


def _bad(call) -> dict:
    with pytest.raises(kernel.BadRequestError) as e:
        call()
    body = e.value.body
    assert isinstance(body, dict) and body.get("code") == "bad_request", body
    return body


def test_refusals_name_the_field(client: Kernel) -> None:
    for location, field in [({"timezone": "Mars/Olympus_Mons"}, "location.timezone"),
                            ({"timezone": "../../etc/passwd"}, "location.timezone"),
                            ({"timezone": "posix/Europe/Berlin"}, "location.timezone"),
                            ({"locale": "en_US"}, "location.locale"),
                            ({"locale": "en-US-abcdefghij"}, "location.locale"),
                            ({"locale": "en-US,de"}, "location.locale")]:
        body = _bad(lambda: client.browsers.create(headless=True, location=location))
        assert field in body["message"], body
        assert any(field in (d.get("message") or "") for d in body.get("details") or []), body
    body = _bad(lambda: client.browsers.create(headless=True, region="eu-west"))
    assert "region" in body["message"] and "us-east" in body["message"] and "eu-west" in body["message"], body
    body = _bad(lambda: client.browsers.create(headless=True, memory="3GiB"))  # not a size at all
    assert "memory" in body["message"], body
    body = _bad(lambda: client.browser_pools.create(size=0, region="ap-southeast"))
    assert "region" in body["message"], body
    # Nothing was created by any of these.
    assert not [x for x in client.browsers.list() if x.location and x.location.timezone_source == "override"]


def test_pool_browsers_carry_memory_and_region(client: Kernel) -> None:
    pool = client.browser_pools.create(size=1, name="py-0131-pool", headless=True, region="us-east", memory="8GiB")
    try:
        assert pool.region == "us-east"
        leased = client.browser_pools.acquire(pool.id, acquire_timeout_seconds=30)
        assert leased is not None
        assert_wire_fields(leased)
        assert leased.memory == "8GiB"
        client.browser_pools.release(pool.id, session_id=leased.session_id, reuse=False)
    finally:
        client.browser_pools.delete(pool.id, force=True)


def test_org_limits_report_what_is_used(client: Kernel) -> None:
    """0.131's usage fields of GET /org/limits: browsers counting toward the session limits (active
    ones outside pools, and each pool's whole size), auth connections, vaults (no cap on either)."""
    before = client.organization.limits.retrieve()
    assert before.concurrent_sessions_available is None  # limits are per project here
    assert isinstance(before.vaults_used, int) and before.max_vaults is None and before.max_auth_connections is None
    assert before.min_health_check_interval_seconds == 300
    base = before.concurrent_sessions_used
    assert isinstance(base, int)

    b = client.browsers.create(headless=True, timeout_seconds=60)
    pool = client.browser_pools.create(size=2, headless=True)
    conn = client.auth.connections.create(domain="limits.example", profile_name="limits-profile")
    try:
        during = client.organization.limits.retrieve()
        assert during.concurrent_sessions_used == base + 1 + 2
        assert during.auth_connections_used == before.auth_connections_used + 1
    finally:
        client.auth.connections.delete(conn.id)
        client.browser_pools.delete(pool.id, force=True)
        client.browsers.delete_by_id(b.session_id)
    after = client.organization.limits.retrieve()
    assert after.concurrent_sessions_used == base
    assert after.auth_connections_used == before.auth_connections_used


def test_api_key_expires_at_is_exact_and_bounded_by_its_issuer(server, client: Kernel) -> None:
    """0.131's `expires_at` on a new key (kernel-api-0131.md §2.8): kept to the millisecond, not with
    days_to_expire, never in the past nor after the issuing key's own expiry, and enforced."""
    import datetime as dt
    import time

    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    made = client.api_keys.create(name="py-exact", expires_at=soon)
    try:
        assert abs((made.expires_at - soon).total_seconds()) < 0.002, (made.expires_at, soon)
        assert client.api_keys.retrieve(made.id).expires_at == made.expires_at
        for fields, why in (({"expires_at": soon, "days_to_expire": 3}, "days_to_expire"),
                            ({"expires_at": soon - dt.timedelta(hours=2)}, "future")):
            with pytest.raises(kernel.BadRequestError) as refused:
                client.api_keys.create(name="py-bad", **fields)
            assert "expires_at" in str(refused.value.body) and why in str(refused.value.body), refused.value.body
        # A key cannot issue one that outlives itself.
        issuer = Kernel(api_key=made.key, base_url=server.base_url, max_retries=0)
        with pytest.raises(kernel.BadRequestError) as refused:
            issuer.api_keys.create(name="py-longer", expires_at=soon + dt.timedelta(minutes=1))
        assert "issuing key" in str(refused.value.body)
        shorter = issuer.api_keys.create(name="py-shorter", expires_at=dt.datetime.now(dt.timezone.utc)
                                         + dt.timedelta(seconds=2))
        brief = Kernel(api_key=shorter.key, base_url=server.base_url, max_retries=0)
        assert brief.auth.context.retrieve().principal.id == shorter.id
        time.sleep(2.5)
        with pytest.raises(kernel.AuthenticationError):
            brief.auth.context.retrieve()
        client.api_keys.delete(shorter.id)
    finally:
        client.api_keys.delete(made.id)


def test_a_memory_size_above_the_nodes_cap_is_refused_and_a_memory_size_never_takes_a_spare() -> None:
    """`memory` is each browser's own cgroup limit, up to [sandbox] max_browser_memory_mb; a warm
    spare runs under the node's limit, so another size starts its own instance."""
    from conftest import launched, wait_for

    with launched({"HANGAR_SANDBOX_MAX_BROWSER_MEMORY_MB": "2048", "HANGAR_WARM_SPARES": "1"}) as s:
        c = Kernel(api_key=s.api_key, base_url=s.base_url, max_retries=0, timeout=120)
        body = _bad(lambda: c.browsers.create(headless=True, memory="8GiB"))
        assert "memory" in body["message"] and "2048 MiB" in body["message"], body
        assert list(c.browsers.list()) == []
        # A headless spare, once a first headless create has shown the demand.
        c.browsers.delete_by_id(c.browsers.create(headless=True).session_id)
        wait_for(lambda: metric_sum(s, "hangar_warm_spares") >= 1, timeout=60, what="a warm spare")
        cold = metric_sum(s, "hangar_browser_creates_total", 'source="cold"')
        small = c.browsers.create(headless=True, memory="1GiB")
        try:
            assert small.memory == "1GiB"
            assert metric_sum(s, "hangar_browser_creates_total", 'source="cold"') == cold + 1
        finally:
            c.browsers.delete_by_id(small.session_id)
        spared = metric_sum(s, "hangar_browser_creates_total", 'source="spare"')
        plain = c.browsers.create(headless=True, memory="4GiB")  # the node's size: a spare serves it
        try:
            assert plain.memory == "4GiB"
            assert metric_sum(s, "hangar_browser_creates_total", 'source="spare"') == spared + 1
        finally:
            c.browsers.delete_by_id(plain.session_id)


def metric_sum(server, name: str, label: str = "") -> float:
    import urllib.request

    req = urllib.request.Request(server.base_url + "/metrics", headers={"Authorization": f"Bearer {server.api_key}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line.split("}")[0]:
            total += float(line.rsplit(" ", 1)[1])
    return total
