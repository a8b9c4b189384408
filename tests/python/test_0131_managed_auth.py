"""Managed auth's 0.131 fields (kernel-api-0131.md §2.4) through the official Python SDK 0.131
against the real server, real Chromium and the login sites of tests/fixtures/sites (a Node process
of their own, on a host port the instances may reach; the same sites tests/e2e/managed_auth.test.mjs
drives):

- the connection's `browser` config (`proxy`, `region`, `stealth`, `telemetry`) kept, layered by a
  login's `browser`, superseding the deprecated `proxy` / `browser_telemetry` (contradictions 400),
  and reaching the auth browser: its stealth, its telemetry, and its proxy (a real tinyproxy, the
  only way to the site's `*.hangar.test` name);
- `skill_mode: "disabled"`: the login neither reads nor writes the learned plan (`plan` in the store);
- a password the site refuses asked again with `reason: "rejected"` (read from the SSE events);
- a choice page's `mfa_type`, `masked_destination`, `display_text`, `context`; the code field's
  `hint` (its aria-describedby text) and `input_mode`;
- `completed_at` on the timeline, `health_check_unavailable_reason`, `can_reauth_reason`.

One auth browser at a time."""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Iterator

import pytest

import kernel
from kernel import Kernel

from conftest import ALLOWED_PORTS, wait_for

HERE = Path(__file__).resolve().parent
DONE = ("SUCCESS", "FAILED", "EXPIRED", "CANCELED")


@pytest.fixture(scope="module")
def sites() -> Iterator[dict]:
    proc = subprocess.Popen(["node", str(HERE / "auth_sites.mjs")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        yield info
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_flow(client: Kernel, cid: str, pred, timeout: float = 120):
    """The connection once `pred` holds; fails at once when the flow ended otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        c = client.auth.connections.retrieve(cid)
        if pred(c):
            return c
        if c.flow_status in DONE:
            raise AssertionError(f"flow ended {c.flow_status}: {c.error_code} {c.error_message} {c.website_error}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for auth connection {cid}: {c}")
        time.sleep(0.25)


def awaiting(c) -> bool:
    return c.flow_step == "AWAITING_INPUT" and c.interaction_id is not None


def plan_of(server, cid: str):
    """The learned plan as the store holds it (None: none)."""
    db = sqlite3.connect(f"file:{Path(server.data_dir) / 'hangar.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT plan FROM managed_auth_connections WHERE id = ?", (cid,)).fetchone()
    finally:
        db.close()
    assert row is not None
    return None if row[0] is None else json.loads(row[0])


def timeline(client: Kernel, cid: str) -> list:
    return list(client.auth.connections.timeline(cid))


# ---- browser config (no browser) -----------------------------------------------------------------


def test_browser_config_kept_and_the_deprecated_fields_are_its_old_names(client: Kernel) -> None:
    name = uniq("py-auth-proxy")
    proxy = client.proxies.create(type="custom", protocol="http", name=name, config={"host": "127.0.0.1", "port": 9})
    try:
        c = client.auth.connections.create(
            domain="cfg.example", profile_name=uniq("py-cfg"),
            browser={"stealth": False, "proxy": {"name": name},
                     "telemetry": {"browser": {"console": {"enabled": True}}}},
        )
        try:
            assert c.browser is not None
            assert c.browser.stealth is False
            assert c.browser.proxy is not None and c.browser.proxy.id == proxy.id  # resolved by name, kept by id
            assert c.browser.region == "us-east"  # this node's
            assert c.browser.telemetry is not None and c.browser.telemetry.browser.console.enabled is True
            # the deprecated fields read the same settings
            assert c.proxy_id == proxy.id
            assert c.browser_telemetry is not None and c.browser_telemetry.browser.console.enabled is True
            # no login has succeeded: no page is known to check
            assert c.health_check_unavailable_reason == "no_auth_check_url"

            # update: only the given properties change
            u = client.auth.connections.update(c.id, browser={"proxy": {"mode": "direct"}})
            assert u.browser.proxy.mode == "direct" and u.browser.proxy.id is None and u.proxy_id is None
            assert u.browser.stealth is False and u.browser.telemetry is not None
            # the deprecated proxy sets browser.proxy
            u = client.auth.connections.update(c.id, proxy={"id": proxy.id})
            assert u.browser.proxy.id == proxy.id
            # both names saying the same thing are one setting
            u = client.auth.connections.update(c.id, proxy={"name": name}, browser={"proxy": {"id": proxy.id}})
            assert u.browser.proxy.id == proxy.id
            # telemetry: null clears it, under either name
            u = client.auth.connections.update(c.id, browser={"telemetry": None})
            assert u.browser.telemetry is None and u.browser_telemetry is None
            u = client.auth.connections.update(c.id, browser_telemetry={"enabled": True})
            assert u.browser.telemetry.enabled is True
            u = client.auth.connections.update(c.id, health_checks=False)
            assert u.health_check_unavailable_reason is None

            # contradictions and bad values: 400 naming the field, nothing changed
            for kwargs, named in [
                ({"proxy": {"id": proxy.id}, "browser": {"proxy": {"mode": "direct"}}}, "browser.proxy"),
                ({"browser_telemetry": {"enabled": True}, "browser": {"telemetry": {"enabled": False}}},
                 "browser.telemetry"),
                ({"browser": {"region": "eu-west"}}, "region"),
                ({"browser": {"proxy": {}}}, "browser.proxy"),
                ({"browser": {"telemetry": {"browser": {"nope": {"enabled": True}}}}}, "browser.telemetry"),
                ({"extra_body": {"browser": {"headless": True}}}, "browser.headless"),
            ]:
                with pytest.raises(kernel.BadRequestError) as e:
                    client.auth.connections.update(c.id, **kwargs)
                assert named in str(e.value.body), (kwargs, e.value.body)
            assert client.auth.connections.retrieve(c.id).browser.telemetry.enabled is True

            # a login is refused before any browser starts
            with pytest.raises(kernel.BadRequestError) as e:
                client.auth.connections.login(c.id, browser={"region": "ap-southeast"})
            assert "region" in str(e.value.body)
            with pytest.raises(kernel.BadRequestError) as e:
                client.auth.connections.login(c.id, extra_body={"skill_mode": "sometimes"})
            assert "skill_mode" in str(e.value.body)
            assert client.auth.connections.retrieve(c.id).flow_status is None
        finally:
            client.auth.connections.delete(c.id)
        with pytest.raises(kernel.BadRequestError):
            client.auth.connections.create(domain="cfg.example", profile_name=uniq("py-cfg"),
                                           proxy={"id": proxy.id}, browser={"proxy": {"mode": "default"}})
    finally:
        client.proxies.delete(proxy.id)


# ---- flows ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tinyproxy(sites: dict) -> Iterator[dict]:
    """tinyproxy on an allowed port, handing `*.hangar.test` to the login sites (only it resolves
    that name, so a page that loads came through it)."""
    if not shutil.which("tinyproxy"):
        pytest.skip("tinyproxy is not installed")
    scratch = tempfile.mkdtemp(prefix="hangar-py-tiny-")
    port = None
    for p in range(ALLOWED_PORTS[0] + 100, ALLOWED_PORTS[0] + 120):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                port = p
                break
            except OSError:
                continue
    assert port is not None
    log = Path(scratch) / "tinyproxy.log"
    conf = Path(scratch) / "tinyproxy.conf"
    conf.write_text("\n".join([
        f"Port {port}", "Listen 127.0.0.1", "Timeout 30", "MaxClients 50", "LogLevel Info", f'LogFile "{log}"',
        "DisableViaHeader Yes", f'Upstream http 127.0.0.1:{sites["port"]} ".hangar.test"', "",
    ]))
    proc = subprocess.Popen(["tinyproxy", "-d", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, timeout=10, what="tinyproxy")
        yield {"port": port, "log": log}
    finally:
        proc.terminate()
        proc.wait(5)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
def test_login_browser_config_reaches_the_auth_browser(client: Kernel, sites: dict, tinyproxy: dict) -> None:
    """The connection's proxy (tinyproxy), a login's stealth and telemetry override: the auth
    browser has each, the site is reached through the proxy, and the timeline says telemetry ran."""
    proxy = client.proxies.create(type="custom", protocol="http", name=uniq("py-auth-tiny"),
                                  config={"host": "127.0.0.1", "port": tinyproxy["port"]})
    c = client.auth.connections.create(
        domain="hangar.test", profile_name=uniq("py-auth-via-proxy"), login_url="http://auth.hangar.test/one/login",
        save_credentials=False, browser={"proxy": {"id": proxy.id}, "stealth": True, "region": "us-east"},
    )
    try:
        client.auth.connections.login(c.id, browser={"stealth": False, "telemetry": {"enabled": True}})
        pause = wait_flow(client, c.id, awaiting)
        # the login form of auth.hangar.test was read: tinyproxy carried it
        assert "auth.hangar.test" in tinyproxy["log"].read_text()
        b = client.browsers.retrieve(pause.browser_session_id)
        assert b.stealth is False  # the login's override
        assert b.proxy is not None and b.proxy.id == proxy.id  # the connection's, inherited
        assert b.region == "us-east"  # the connection's (the one region this node serves)
        assert b.telemetry is not None  # the login's telemetry, captured
        client.auth.connections.submit(c.id, interaction_id=pause.interaction_id,
                                       field_values={"identifier": sites["user"], "password": sites["password"]})
        end = wait_flow(client, c.id, lambda x: x.flow_status in DONE)
        assert end.flow_status == "SUCCESS", end
        assert end.post_login_url == "http://auth.hangar.test/one/account"
        assert end.health_check_unavailable_reason is None  # a logged-in page is known now
        # the override was for that login only
        assert end.browser.stealth is True and end.browser.telemetry is None
        (t,) = timeline(client, c.id)
        assert t.telemetry_captured is True
        assert t.completed_at is not None and t.completed_at >= t.timestamp
    finally:
        client.auth.connections.delete(c.id)
        client.proxies.delete(proxy.id)


def test_skill_mode_disabled_neither_reads_nor_writes_the_plan(client: Kernel, server, sites: dict) -> None:
    cred = uniq("py-skill")
    client.credentials.create(name=cred, domain="127.0.0.1",
                              values={"username": sites["user"], "password": sites["password"]})
    c = client.auth.connections.create(domain="127.0.0.1", profile_name=uniq("py-skill"),
                                       login_url=f"{sites['origin']}/one/login", credential={"name": cred})
    try:
        def login(**kw):
            r = client.auth.connections.login(c.id, **kw)
            end = wait_flow(client, c.id, lambda x: x.flow_status in DONE)
            assert end.flow_status == "SUCCESS", end
            return r, end

        r, end = login(skill_mode="disabled")
        assert plan_of(server, c.id) is None  # nothing learned was written
        assert end.can_reauth_reason == "has_credential"
        r, end = login()  # enabled by default: the plan is written
        learned = plan_of(server, c.id)
        assert learned is not None and learned["steps"]
        assert end.can_reauth_reason == "viable_plans_found"
        r, end = login()
        assert r.flow_type == "REAUTH"  # the plan is read: a re-auth
        learned = plan_of(server, c.id)
        r, end = login(skill_mode="disabled")
        assert r.flow_type == "LOGIN"  # not read
        assert plan_of(server, c.id) == learned  # nor rewritten
        # every attempt has its completion time
        events = timeline(client, c.id)
        assert len(events) == 4 and all(e.completed_at is not None for e in events)
    finally:
        client.auth.connections.delete(c.id)
        client.credentials.delete(cred)


def test_a_refused_password_is_asked_again_as_rejected(client: Kernel, sites: dict) -> None:
    """Read from the SSE events: the first pause asks for both fields as missing, the site refuses
    the password typed, the next pause asks again with reason rejected and the site's words."""
    c = client.auth.connections.create(domain="127.0.0.1", profile_name=uniq("py-rejected"),
                                       login_url=f"{sites['origin']}/one/login", save_credentials=False)
    try:
        client.auth.connections.login(c.id)
        pauses = []
        # Closed on the way out: a stream left to the garbage collector closes its response in
        # the middle of a later request and deadlocks httpx's connection pool.
        with client.auth.connections.follow(c.id) as events:
            for e in events:
                if e.event != "managed_auth_state":
                    continue
                if e.flow_step == "AWAITING_INPUT" and e.interaction_id and all(
                        p.interaction_id != e.interaction_id for p in pauses):
                    pauses.append(e)
                    wrong = len(pauses) == 1
                    client.auth.connections.submit(c.id, interaction_id=e.interaction_id, field_values={
                        "identifier": sites["user"], "password": "not the password" if wrong else sites["password"]})
                if e.flow_status in DONE:
                    assert e.flow_status == "SUCCESS", (e.error_code, e.error_message, pauses)
                    break
        assert len(pauses) == 2, pauses
        first, second = ({f.id: f for f in p.fields} for p in pauses)
        assert {f.reason for f in first.values()} == {"missing"}
        assert second["password"].reason == "rejected"
        assert second["identifier"].reason == "rejected"  # typed by the user too, refused with it
        assert pauses[1].website_error == "Invalid email or password."
        assert second["identifier"].input_mode == "email"  # type=email
        assert second["password"].input_mode == "text"
        (t,) = timeline(client, c.id)
        assert t.status == "SUCCESS" and t.completed_at is not None
    finally:
        client.auth.connections.delete(c.id)


@pytest.mark.slow
def test_choice_details_and_the_code_fields_hint(client: Kernel, sites: dict) -> None:
    cred = uniq("py-mfa")
    client.credentials.create(name=cred, domain="127.0.0.1",
                              values={"username": sites["user"], "password": sites["password"]})
    c = client.auth.connections.create(domain="127.0.0.1", profile_name=uniq("py-mfa"),
                                       login_url=f"{sites['origin']}/mfa/login", credential={"name": cred})
    try:
        client.auth.connections.login(c.id)
        choose = wait_flow(client, c.id, lambda x: awaiting(x) and bool(x.choices))
        by_type = {ch.mfa_type: ch for ch in choose.choices}
        assert set(by_type) == {"totp", "sms"}, choose.choices
        sms = by_type["sms"]
        assert sms.type == "mfa_method"
        assert sms.masked_destination == "***-***-0199"
        assert sms.display_text == "Text message to ***-***-0199"
        assert sms.context == "How do you want to get your code?"
        assert by_type["totp"].masked_destination is None
        assert by_type["totp"].context == "How do you want to get your code?"
        assert {o.type: o.target for o in choose.mfa_options}["sms"] == "***-***-0199"

        client.auth.connections.submit(c.id, interaction_id=choose.interaction_id, selected_choice_id=sms.id)
        code = wait_flow(client, c.id, lambda x: awaiting(x) and bool(x.fields))
        (f,) = code.fields
        assert f.type == "code" and f.reason == "missing"
        assert f.input_mode == "numeric"  # inputmode=numeric
        assert f.hint == "We sent a 6-digit code to ***-***-0199. It expires in 10 minutes."
        assert code.discovered_fields[0].hint == f.hint
        client.auth.connections.submit(c.id, interaction_id=code.interaction_id, field_values={f.id: sites["sms_code"]})
        end = wait_flow(client, c.id, lambda x: x.flow_status in DONE)
        assert end.flow_status == "SUCCESS", end
        # a code sent by text message cannot be read by an unattended re-auth
        assert end.can_reauth is False and end.can_reauth_reason == "requires_sms_code"
        (t,) = timeline(client, c.id)
        assert isinstance(t.completed_at, datetime) and t.completed_at >= t.timestamp
        assert t.updated_at is not None and t.completed_at <= t.updated_at
    finally:
        client.auth.connections.delete(c.id)
        client.credentials.delete(cred)
