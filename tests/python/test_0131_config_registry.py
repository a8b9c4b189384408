"""Config registry and analyses (kernel-api-0131 §1D) through the official Python SDK, self-hosted:
an analysis loads the target in real Hangar browsers (headless/headful × stealth off/on × direct
and each project proxy, cheapest first) and recommends the cheapest configuration that loaded it.

Two local fixture sites on host ports the sandboxes may reach (the server's [server] fetch_allow
lists them, as an operator would):
* an automation-refusing site. The issue names @fingerprintjs/botd; it is not installed here (no
  npm package in this environment), so the page's own script checks what botd's automation
  detectors read first: `navigator.webdriver` and headless markers in the user agent, and
  replaces the page with "Access denied: automated browser detected".
* a proxy-only site: 403 to every request that did not come through a proxy (tinyproxy, Debian's,
  adds a `Via` header). The proxy is real: tinyproxy created as a project proxy.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import kernel
import pytest
from kernel import Kernel

from conftest import ALLOWED_PORTS, config_dir, launched, reply, serving, wait_for

BOT_PAGE = """<!doctype html><html><head><title>Loading</title></head><body><p id=msg>checking</p>
<script>
  const automated = navigator.webdriver === true || /Headless/i.test(navigator.userAgent);
  if (automated) {
    document.title = 'Access denied';
    document.body.innerText = 'Access denied: automated browser detected';
  } else {
    document.title = 'Welcome';
    document.getElementById('msg').textContent = 'welcome, human';
  }
</script></body></html>"""


class BotSite(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = BOT_PAGE.encode()
        reply(self, 200, body)

    def log_message(self, *args: object) -> None:
        pass


class ProxyOnlySite(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        proxied = "tinyproxy" in (self.headers.get("Via") or "")
        body = (b"<!doctype html><title>Proxy shop</title><p>hello, proxied visitor</p>" if proxied
                else b"<!doctype html><title>Forbidden</title><p>direct visitors are refused</p>")
        reply(self, 200 if proxied else 403, body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def tinyproxy(d: str) -> Iterator[int]:
    for port in range(ALLOWED_PORTS[0] + 60, ALLOWED_PORTS[0] + 100):
        conf = Path(d) / f"tinyproxy-{port}.conf"
        conf.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 50\nLogLevel Info\n"
                        f'LogFile "{d}/tinyproxy-{port}.log"\n')
        proc = subprocess.Popen(["tinyproxy", "-d", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        if proc.poll() is None:
            try:
                yield port
            finally:
                proc.terminate()
                proc.wait(10)
            return
    raise RuntimeError("no free port for tinyproxy")


@pytest.fixture(scope="module")
def env() -> Iterator[dict]:
    with tempfile.TemporaryDirectory(prefix="hangar-registry-") as d:
        cfg = config_dir(d, {"fetch_allow": f"127.0.0.1:{ALLOWED_PORTS[0]}-{ALLOWED_PORTS[1]}"},
                         {"config_registry": "parallelism = 2\nsettle_ms = 500\n"})
        with serving(BotSite, range(ALLOWED_PORTS[0] + 110, ALLOWED_PORTS[0] + 130)) as bot_port, \
                serving(ProxyOnlySite, range(ALLOWED_PORTS[0] + 130, ALLOWED_PORTS[0] + 150)) as shop_port, \
                tinyproxy(d) as proxy_port, launched({"HANGAR_CONFIG": cfg}) as srv:
            client = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=120, max_retries=0)
            yield {"server": srv, "client": client, "bot": f"http://127.0.0.1:{bot_port}/account",
                   "shop": f"http://127.0.0.1:{shop_port}/cart", "proxy_port": proxy_port}


def no_browsers_left(client: Kernel) -> bool:
    return not list(client.browsers.list())


def test_lookup_of_an_unknown_url_and_bad_input(env) -> None:
    client: Kernel = env["client"]
    r = client.config_registry.lookup(url="https://unknown.example.com/Path?q=1")
    assert r.target.normalized == "https://unknown.example.com/Path"
    assert (r.target.host, r.target.domain) == ("unknown.example.com", "example.com")
    assert r.working_configurations == []
    assert r.recommendation.type == "no_recommendation"
    with pytest.raises(kernel.BadRequestError):
        client.config_registry.lookup(url="ftp://example.com/")
    # Not public and not allowed by the operator's fetch_allow.
    with pytest.raises(kernel.BadRequestError):
        client.config_registry.lookup(url="http://127.0.0.1:9/")
    with pytest.raises(kernel.BadRequestError):
        client.config_registry.resolve(url="http://example.com/", intent="buy a thing")
    with pytest.raises(kernel.APIStatusError) as e:
        client.config_registry.resolve(url="https://example.com/", intent="buy a thing")
    assert e.value.status_code == 501


def test_analysis_recommends_stealth_for_an_automation_refusing_site(env) -> None:
    client: Kernel = env["client"]
    started = time.monotonic()
    r = client.config_registry.resolve(url=env["bot"])
    assert r.analysis is not None and r.analysis.status == "running" and r.analysis.finished_at is None
    done = client.config_registry.analyses.wait_for_result(r.analysis.id, poll_interval=0.5, max_wait_seconds=240)
    print(f"bot-site analysis took {time.monotonic() - started:.1f} s\n{done.guidance}")
    assert done.analysis.status == "completed", done
    rec = done.recommendation
    assert rec.type == "recommendation", rec
    assert (rec.browser.headless, rec.browser.stealth, rec.proxy.mode) == (True, True, "direct")
    assert rec.evidence.accessed >= 1 and rec.evidence.success_rate == 1.0
    assert rec.match_scope == "exact" and rec.matched_target == env["bot"]
    # The cheaper configuration was tried and blocked: the evidence says so.
    assert "headless + direct: blocked" in (done.guidance or ""), done.guidance
    # resolve/lookup now answer from what the analysis learned.
    looked = client.config_registry.lookup(url=env["bot"])
    assert looked.recommendation.type == "recommendation" and looked.recommendation.browser.stealth is True
    wider = client.config_registry.lookup(url=env["bot"].replace("/account", "/other"))
    assert wider.recommendation.match_scope == "host" and wider.recommendation.browser.stealth is True
    wait_for(lambda: no_browsers_left(client), timeout=30, what="the analysis's browsers gone")


def test_analysis_recommends_the_proxy_for_a_proxy_only_site_then_cancel(env) -> None:
    client: Kernel = env["client"]
    name = f"tiny-{uuid.uuid4().hex[:6]}"
    proxy = client.proxies.create(type="custom", protocol="http", name=name,
                                  config={"host": "127.0.0.1", "port": env["proxy_port"]})
    try:
        r = client.config_registry.resolve(url=env["shop"])
        done = client.config_registry.analyses.wait_for_result(r.analysis.id, poll_interval=0.5,
                                                               max_wait_seconds=300)
        print(done.guidance, done.recommendation)
        assert done.analysis.status == "completed", done
        rec = done.recommendation
        assert rec.type == "recommendation", done
        assert rec.proxy.mode == "managed" and rec.proxy.create.name == name, rec.proxy
        assert rec.browser.headless is True and rec.browser.stealth is False
        assert "HTTP 403" in (done.guidance or "")
        # resolve answers the learned settings right away, and starts a fresh run: cancel it.
        again = client.config_registry.resolve(url=env["shop"])
        assert again.recommendation.type == "recommendation" and again.recommendation.proxy.mode == "managed"
        assert again.analysis.id != r.analysis.id and again.analysis.status == "running"
        time.sleep(1.5)
        client.config_registry.analyses.cancel(again.analysis.id)
        canceled = client.config_registry.analyses.wait_for_result(again.analysis.id, poll_interval=0.5,
                                                                   max_wait_seconds=60)
        assert canceled.analysis.status == "canceled" and canceled.analysis.finished_at is not None
        # Idempotent after the end; and no browser of the run is left behind.
        assert client.config_registry.analyses.cancel(again.analysis.id).analysis.status == "canceled"
        wait_for(lambda: no_browsers_left(client), timeout=30, what="the canceled run's browsers gone")
        # A proxy whose config names no country is outside any allowed_proxy_countries: the run
        # tries only the direct candidates, all refused.
        us = client.config_registry.resolve(url=env["shop"], allowed_proxy_countries=["US"])
        blocked = client.config_registry.analyses.wait_for_result(us.analysis.id, poll_interval=0.5,
                                                                  max_wait_seconds=300)
        assert blocked.analysis.status == "completed"
        assert blocked.recommendation.type == "no_recommendation"
        assert blocked.recommendation.code == "no_working_configuration", blocked.recommendation
        assert name not in (blocked.guidance or "")
        assert client.config_registry.lookup(url=env["shop"], allowed_proxy_countries=["US"]).recommendation.type \
            == "no_recommendation"
    finally:
        wait_for(lambda: no_browsers_left(client), timeout=60, what="browsers gone")
        client.proxies.delete(proxy.id)


def by_target_default(client: Kernel) -> list[str]:
    return [s.target for s in client.config_registry.list()]


def test_list_search_sort_and_projects(env) -> None:
    client: Kernel = env["client"]
    targets = [s.target for s in client.config_registry.list()]
    assert env["bot"] in targets and env["shop"] in targets
    assert len(targets) == len(set(targets)), "one row per exact target"
    only = list(client.config_registry.list(search="/ACCOUNT"))
    assert [s.target for s in only] == [env["bot"]]
    assert only[0].recommendation.browser.stealth is True and only[0].success_rate == 1.0
    by_target = [s.target for s in client.config_registry.list(sort_by="target", sort_order="asc")]
    assert by_target == sorted(by_target)
    page = client.config_registry.list(limit=1)
    assert len(page.items) == 1
    second = client.config_registry.list(limit=1, offset=1)
    assert [s.target for s in second.items] == [by_target_default(client)[1]]
    analyses = list(client.config_registry.analyses.list())
    assert len(analyses) >= 3
    assert [a.analysis.id for a in client.config_registry.analyses.list(limit=1, offset=1).items] == \
        [analyses[1].analysis.id]
    assert [a.analysis.created_at for a in analyses] == sorted((a.analysis.created_at for a in analyses),
                                                                reverse=True)
    assert {a.target.normalized for a in client.config_registry.analyses.list(search="account")} == {env["bot"]}

    srv = env["server"]
    project = client.projects.create(name=f"py-registry-{uuid.uuid4().hex[:6]}")
    try:
        other = Kernel(api_key=srv.api_key, base_url=srv.base_url, project_id=project.id, max_retries=0)
        assert list(other.config_registry.list()) == []
        assert list(other.config_registry.analyses.list()) == []
        assert other.config_registry.lookup(url=env["bot"]).recommendation.type == "no_recommendation"
        with pytest.raises(kernel.NotFoundError):
            other.config_registry.analyses.retrieve(analyses[0].analysis.id)
        with pytest.raises(kernel.NotFoundError):
            other.config_registry.analyses.cancel(analyses[0].analysis.id)
    finally:
        client.projects.delete(project.id)


def test_operator_seed_answers_every_project_at_its_scope() -> None:
    """The operator's seed file (config_registry.ini seed_file) is knowledge for every project: a
    `domain` entry answers any host under that registrable domain, an `exact` one only its target;
    a managed proxy outside allowed_proxy_countries is not offered."""
    with tempfile.TemporaryDirectory(prefix="hangar-registry-seed-") as d:
        seed = Path(d) / "seed.json"
        seed.write_text("""[
          {"target": "https://www.example.org/", "match": "domain", "browser": {"headless": false, "stealth": true},
           "evidence": {"accessed": 4, "blocked": 1, "run_count": 2}},
          {"target": "https://shop.example.net/cart", "browser": {"headless": true, "stealth": false},
           "proxy": {"mode": "managed", "create": {"type": "residential", "config": {"country": "DE"}}}}
        ]""")
        cfg = config_dir(d, {}, {"config_registry": f"seed_file = {seed}\n"})
        with launched({"HANGAR_CONFIG": cfg}) as srv:
            client = Kernel(api_key=srv.api_key, base_url=srv.base_url, max_retries=0)
            r = client.config_registry.lookup(url="https://blog.example.org/post/1")
            rec = r.recommendation
            assert rec.type == "recommendation" and rec.match_scope == "domain", rec
            assert (rec.browser.headless, rec.browser.stealth, rec.proxy.mode) == (False, True, "direct")
            assert (rec.evidence.accessed, rec.evidence.blocked, rec.evidence.run_count) == (4, 1, 2)
            assert rec.evidence.success_rate == 0.8 and rec.matched_target == "https://www.example.org/"
            exact = client.config_registry.lookup(url="https://shop.example.net/cart")
            assert exact.recommendation.proxy.mode == "managed" and exact.recommendation.match_scope == "exact"
            assert client.config_registry.lookup(url="https://shop.example.net/cart",
                                                 allowed_proxy_countries=["us"]).recommendation.type == \
                "no_recommendation"
            # An exact entry does not reach other paths of its host.
            assert client.config_registry.lookup(url="https://shop.example.net/").recommendation.type == \
                "no_recommendation"
