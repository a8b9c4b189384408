"""Web search (kernel-api-0131.md §1C) through the official Python SDK 0.131 against a real
metasearch server: searx 0.17.0, SearXNG's predecessor with the same `GET /search?format=json`
API (SearXNG itself is not on PyPI; `make searx` installs searx under
/root/.cache/hangar-tools/). The network is closed here, so searx's one engine is its own
`json_engine` pointed at a small local corpus this test serves: the answers Hangar parses are
searx's, not a double's.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

import kernel
from kernel import Kernel

from conftest import REPO, launched, reply, serving

sys.path.insert(0, str(REPO / "tests" / "tools" / "searx"))
import searx_server  # noqa: E402  (tests/tools/searx: the searx the fuzz run uses too)

CAP = 12  # searxng_max_results of the test server


@pytest.fixture(scope="module")
def searx() -> Iterator[str]:
    if not os.path.exists(searx_server.python()):
        pytest.fail(f"{searx_server.python()} is missing: run `make searx` (searx 0.17.0 in a venv)")
    with serving(searx_server.Corpus, range(21150, 21199)) as corpus, searx_server.running(corpus) as url:
        yield url


@contextlib.contextmanager
def search_server(searxng_url: str, extra: str = "") -> Iterator[object]:
    """A Hangar with only the org and search plugins (no browser is needed here)."""
    with tempfile.TemporaryDirectory(prefix="hangar-search-cfg-") as d:
        shutil.copytree(REPO / "etc", d, dirs_exist_ok=True)
        for f in Path(d, "plugins.d").iterdir():
            if f.stem not in ("org", "search"):
                f.unlink()
        ini = Path(d, "plugins.d", "search.ini")
        ini.write_text(ini.read_text() + f"\nsearxng_url = {searxng_url}\nsearxng_max_results = {CAP}\n"
                       "providers = searxng, brave\n" + extra + "\n")
        with launched({"HANGAR_CONFIG": str(Path(d, "hangar.ini"))}) as s:
            yield s


@pytest.fixture(scope="module")
def server(searx: str) -> Iterator[object]:
    with search_server(searx) as s:
        yield s


@pytest.fixture(scope="module")
def client(server) -> Kernel:
    return Kernel(api_key=server.api_key, base_url=server.base_url, timeout=60, max_retries=0)


def raw(client: Kernel, method: str, path: str, body: object = None) -> tuple[int, dict]:
    req = urllib.request.Request(str(client.base_url).rstrip("/") + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {client.api_key}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_providers_list_searxng_available_and_keyless_paid_ones_unavailable(client: Kernel) -> None:
    providers = client.search.providers.list()
    by_slug = {p.slug: p for p in providers}
    assert set(by_slug) == {"searxng", "brave", "exa", "perplexity", "context", "parallel", "valyu", "octen", "you",
                            "tavily", "serpapi"}
    sx = by_slug["searxng"]
    assert sx.to_dict()["available"] is True
    assert sx.max_results_cap == CAP
    assert sx.content.post_hoc and sx.content.inline
    assert sx.params.language.support == "native"
    assert sx.params.include_domains.support == "emulated"
    assert sx.params.start_date.support == "unsupported"
    brave = by_slug["brave"].to_dict()
    assert brave["available"] is False
    assert "API key" in brave["unavailable_reason"]
    assert [p.slug for p in client.search.providers.list(slug="brave")] == ["brave"]
    assert client.search.providers.list(slug="nope") == []  # type: ignore[arg-type]


def test_auto_search_is_served_by_searxng_retained_and_retrievable(client: Kernel) -> None:
    before = time.time()
    s = client.search.create(query="hangar docs")
    assert s.id and s.query == "hangar docs"
    assert s.provider == "searxng"
    assert [r.rank for r in s.results] == list(range(1, 11))  # max_results defaults to 10
    first = s.results[0]
    assert first.url == "https://docs.example.org/hangar-docs/1"
    assert first.title == "hangar docs result 1"
    assert first.snippet == "snippet 1 about hangar docs"
    assert first.source == "local corpus"
    assert first.content is None  # not asked for
    assert len({r.id for r in s.results}) == 10
    assert [(a.provider, a.outcome) for a in s.attempts] == [("searxng", "success")]
    assert s.warnings == []
    assert s.usage.results_count == 10 and s.usage.content_fetches == 0 and s.usage.cost == 0
    assert before + 86400 - 5 < s.expires_at.timestamp() < time.time() + 86400 + 5
    got = client.search.retrieve(s.id)
    assert got.to_dict() == s.to_dict()


def test_pinned_and_fallback_strategies(client: Kernel) -> None:
    s = client.search.create(query="pinned n3", strategy={"type": "pinned", "provider": {"provider": "searxng"}})  # type: ignore[typeddict-item]
    assert s.provider == "searxng" and len(s.results) == 3
    # A provider the operator gave no key cannot be pinned: a clear 400 naming it.
    with pytest.raises(kernel.BadRequestError) as e:
        client.search.create(query="x", strategy={"type": "pinned", "provider": {"provider": "brave"}})
    assert "brave" in str(e.value) and "API key" in str(e.value)
    # In a chain it is passed over with a warning.
    s = client.search.create(query="chain n2", strategy={"type": "fallback", "providers": [
        {"provider": "exa"}, {"provider": "searxng"}]})  # type: ignore[list-item]
    assert s.provider == "searxng"
    assert [(w.code, w.provider) for w in s.warnings] == [("provider_ineligible", "exa")]
    assert [a.provider for a in s.attempts] == ["searxng"]
    # auto restricted to unconfigured providers has nobody to ask.
    with pytest.raises(kernel.BadRequestError):
        client.search.create(query="x", strategy={"type": "auto", "provider_options": [{"provider": "tavily"}]})
    # An empty answer is served as such, with its attempt.
    s = client.search.create(query="nothing at all")
    assert s.results == [] and [a.outcome for a in s.attempts] == ["empty"]


def test_max_results_is_clamped_with_a_warning_or_refused_under_strict_params(client: Kernel) -> None:
    s = client.search.create(query="many", max_results=40)
    assert len(s.results) == CAP
    assert [w.code for w in s.warnings] == ["max_results_clamped"]
    assert s.warnings[0].param == "max_results" and s.warnings[0].provider == "searxng"
    s = client.search.create(query="few", max_results=4)
    assert len(s.results) == 4 and s.warnings == []
    with pytest.raises(kernel.BadRequestError) as e:
        client.search.create(query="many", max_results=40, strict_params=True)
    assert "max_results" in str(e.value)
    # A portable parameter SearXNG lacks is dropped with a warning, or refused under strict_params.
    s = client.search.create(query="dated", start_date="2024-01-01")
    assert [(w.code, w.param) for w in s.warnings] == [("param_unsupported", "start_date")]
    with pytest.raises(kernel.BadRequestError):
        client.search.create(query="dated", start_date="2024-01-01", strict_params=True)
    # Domain filters are emulated on the results' hosts.
    s = client.search.create(query="domains", include_domains=["blog.example.org"])
    assert s.results and all(r.url.startswith("https://blog.example.org/") for r in s.results)
    assert [w.code for w in s.warnings] == ["filter_emulated"]
    s = client.search.create(query="domains", exclude_domains=["blog.example.org"])
    assert s.results and all(r.url.startswith("https://docs.example.org/") for r in s.results)
    # SearXNG's own parameters pass through (its answer shows the language and safe search it ran
    # with); country and an end date it lacks are dropped with warnings.
    s = client.search.create(query="tuned n3", language="fr", safe_search="strict", country="DE",
                             end_date="2025-01-01")
    assert len(s.results) == 3
    assert sorted(w.param for w in s.warnings if w.code == "param_unsupported") == ["country", "end_date"]
    # recency reaches searx as its time_range: searx then skips engines without time-range support,
    # which its one local engine is, so it answers nothing.
    assert client.search.create(query="recent n3").results
    assert client.search.create(query="recent n3", recency="week").results == []


def test_include_raw_carries_searxngs_own_answer(client: Kernel) -> None:
    s = client.search.create(query="raw n2", include_raw=True)
    assert isinstance(s.raw, dict) and s.raw["query"] == "raw n2"
    assert [r["url"] for r in s.raw["results"]] == [r.url for r in s.results]
    assert s.results[0].raw["engine"] == "local corpus"  # type: ignore[index]
    assert client.search.retrieve(s.id).raw == s.raw
    assert client.search.create(query="plain n1").raw is None


def test_another_projects_key_gets_404(server, client: Kernel) -> None:
    s = client.search.create(query="private n2")
    project = client.projects.create(name="py-search-other")
    made = client.api_keys.create(name="py-search-scoped", project_id=project.id)
    try:
        scoped = Kernel(api_key=made.key, base_url=server.base_url, max_retries=0)
        with pytest.raises(kernel.NotFoundError):
            scoped.search.retrieve(s.id)
        with pytest.raises(kernel.NotFoundError):
            scoped.search.contents.fetch(s.id, limit=1, content={"source": "provider"})
        mine = scoped.search.create(query="theirs n1")
        assert scoped.search.retrieve(mine.id).id == mine.id
        with pytest.raises(kernel.NotFoundError):
            client.search.retrieve(mine.id)
    finally:
        client.api_keys.delete(made.id)
        client.projects.delete(project.id)


def test_contents_from_the_provider(client: Kernel) -> None:
    s = client.search.create(query="content n6")
    got = client.search.contents.fetch(s.id, limit=3, content={"source": "provider", "max_chars": 9})
    assert got.search_id == s.id
    assert [c.result_id for c in got.contents] == [r.id for r in s.results[:3]]
    assert [c.url for c in got.contents] == [r.url for r in s.results[:3]]
    one, two, three = got.contents
    assert (one.status, one.text, one.truncated) == ("ok", "snippet 1", True)
    assert one.method == "provider" and one.completeness == "excerpt" and one.format == "text"
    assert one.cache_status == "bypass" and one.fetched_at is not None
    assert two.status == "ok"
    assert three.status == "unavailable" and three.text is None and three.error is not None  # no body → no content
    assert got.usage.results_count == 3 and got.usage.content_fetches == 0
    # In the order asked; auto serves retained content when every result has it.
    got = client.search.contents.fetch(s.id, result_ids=[s.results[1].id, s.results[0].id])
    assert [(c.result_id, c.text) for c in got.contents] == [(s.results[1].id, "snippet 2 about content n6"),
                                                             (s.results[0].id, "snippet 1 about content n6")]
    # This server runs no browsers plugin: a page that needs a browser answers 501 naming it.
    for content in ({"source": "browser"}, {"source": "auto"}):
        status, body = raw(client, "POST", f"/search/{s.id}/contents",
                           {"result_ids": [s.results[2].id], "content": content})
        assert status == 501 and body["code"] == "not_implemented"
        assert "browsers plugin" in body["message"]
    # Inline: the provider's content on each result.
    s = client.search.create(query="inline n3", content=True)
    assert [r.content.status for r in s.results] == ["ok", "ok", "unavailable"]  # type: ignore[union-attr]
    assert s.results[0].content.completeness == "excerpt"  # type: ignore[union-attr]


def test_bad_input_answers_400_naming_the_field(client: Kernel) -> None:
    s = client.search.create(query="bad n2")
    for body, named in (({"query": ""}, "query"), ({"query": "x", "max_results": 0}, "max_results"),
                        ({"query": "x", "country": "Germany"}, "country"),
                        ({"query": "x", "strategy": {"type": "pinned", "provider": {"provider": "bing"}}}, "provider"),
                        ({"query": "x", "content": {"source": "browser"}}, "content.source"),
                        ({"query": "x", "recency": "decade"}, "recency"), ({"qurey": "x"}, "qurey")):
        status, err = raw(client, "POST", "/search", body)
        assert status == 400, body
        assert named in err["message"], (body, err)
    for body, named in (({}, "result_ids"), ({"limit": 1, "result_ids": [s.results[0].id]}, "result_ids"),
                        ({"result_ids": ["sr_unknown"]}, "sr_unknown"), ({"limit": 0}, "limit")):
        with pytest.raises(kernel.BadRequestError) as e:
            client.search.contents.fetch(s.id, **body)  # type: ignore[arg-type]
        assert named in str(e.value)
    with pytest.raises(kernel.NotFoundError):
        client.search.retrieve("srch_nope")


def test_searches_expire_after_the_retention(searx: str) -> None:
    with search_server(searx, "retention_seconds = 2") as srv:
        c = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=60, max_retries=0)
        s = c.search.create(query="fleeting n1")
        assert s.expires_at.timestamp() - datetime.now(timezone.utc).timestamp() < 3
        assert c.search.retrieve(s.id).id == s.id
        time.sleep(2.5)
        with pytest.raises(kernel.NotFoundError):
            c.search.retrieve(s.id)
        with pytest.raises(kernel.NotFoundError):
            c.search.contents.fetch(s.id, limit=1)


def test_an_unreachable_searxng_is_a_502_with_the_attempt_trail() -> None:
    with search_server(f"http://127.0.0.1:{searx_server.free_port()}") as srv:
        c = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=60, max_retries=0)
        with pytest.raises(kernel.APIStatusError) as e:
            c.search.create(query="anything")
        assert e.value.status_code == 502
        assert "searxng: error (unreachable)" in str(e.value)


def test_the_deadline_ends_a_slow_attempt_as_a_timeout(client: Kernel) -> None:
    began = time.monotonic()
    with pytest.raises(kernel.APIStatusError) as e:
        client.search.create(query="slow n1", timeout_ms=500)
    assert time.monotonic() - began < 2.5
    assert e.value.status_code == 502
    assert "searxng: timeout" in str(e.value)


# ---- contents through a Hangar browser (issue 50) ----

ARTICLE = """<!doctype html><html><head><title>An article</title></head><body>
<header>Site banner header</header><nav><a href="/">Site navigation home</a></nav>
<article><h1>Gliders of the north</h1><p>The long-winged glider rides the ridge lift for hours.</p>
<p>See <a href="/more">the field guide</a> for details.</p></article>
<aside>Related advertising aside</aside><footer>Copyright footer text</footer>
<script>document.title = "script ran"; var x = "script body text";</script></body></html>"""
MOVED = "<!doctype html><html><body><main><h2>Moved here</h2><p>The page after the redirect.</p></main></body></html>"
BIG = "<!doctype html><html><body><article><p>" + "lorem ipsum dolor " * 120_000 + "</p></article></body></html>"


class Pages(http.server.BaseHTTPRequestHandler):
    """The pages the results point at: an article with boilerplate around it, a redirect, a page of
    about 2 MiB, a slow one; every path asked is kept in `hits`."""

    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        Pages.hits.append(self.path)
        path = urllib.parse.urlparse(self.path).path
        if path == "/old":
            self.send_response(302)
            self.send_header("Location", "/moved")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/slow":
            time.sleep(6)
        if path == "/file.pdf":
            data = b"%PDF-1.4 not really"
            reply(self, 200, data, "application/pdf")
            return
        body = {"/article": ARTICLE, "/moved": MOVED, "/big": BIG, "/slow": ARTICLE}.get(path)
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def browser_search_server(searxng_url: str) -> Iterator[object]:
    """A Hangar with org, search, browsers and proxies (whose forwarder holds a browser to its allowlist)."""
    with tempfile.TemporaryDirectory(prefix="hangar-search-cfg-") as d:
        shutil.copytree(REPO / "etc", d, dirs_exist_ok=True)
        for f in Path(d, "plugins.d").iterdir():
            if f.stem not in ("org", "search", "browsers", "proxies"):
                f.unlink()
        ini = Path(d, "plugins.d", "search.ini")
        ini.write_text(ini.read_text() + f"\nsearxng_url = {searxng_url}\nsearxng_max_results = {CAP}\n")
        with launched({"HANGAR_CONFIG": str(Path(d, "hangar.ini"))}) as s:
            yield s


@pytest.fixture(scope="module")
def pages() -> Iterator[str]:
    with serving(Pages, range(21100, 21150)) as port:
        base = f"http://127.0.0.1:{port}"
        searx_server.Corpus.local[:] = [f"{base}/article", f"{base}/old", f"{base}/big", f"{base}/slow", f"{base}/file.pdf"]
        yield base


@pytest.fixture(scope="module")
def bclient(searx: str, pages: str) -> Iterator[Kernel]:
    with browser_search_server(searx) as s:
        yield Kernel(api_key=s.api_key, base_url=s.base_url, timeout=120, max_retries=0)


def test_contents_through_a_temporary_browser(bclient: Kernel, pages: str) -> None:
    s = bclient.search.create(query="local pages")
    assert [r.url for r in s.results] == searx_server.Corpus.local
    article, moved, big, slow, pdf = s.results
    got = bclient.search.contents.fetch(s.id, result_ids=[article.id, moved.id, big.id],
                                        content={"source": "browser", "max_chars": 4000})
    assert [c.result_id for c in got.contents] == [article.id, moved.id, big.id]
    a, m, b = got.contents
    assert a.status == "ok" and a.method == "browser_render" and a.format == "markdown"
    assert a.http_status == 200 and a.final_url == f"{pages}/article" and a.cache_status == "bypass"
    # Mozilla Readability when `make setup-npm` installed it before the build configured, else the DOM walk.
    readability = (REPO / "plugins/browsers/extractor/node_modules/@mozilla/readability/Readability.js").exists()
    assert a.extractor_version == ("readability-0.6.0" if readability else "innertext-1")
    assert a.completeness == "full_page" and a.truncated is False
    assert "# Gliders of the north" in a.text and "rides the ridge lift" in a.text
    assert f"[the field guide]({pages}/more)" in a.text
    for boilerplate in ("Site banner", "Site navigation", "advertising", "Copyright", "script body"):
        assert boilerplate not in a.text
    assert m.status == "ok" and m.final_url == f"{pages}/moved" and "Moved here" in m.text
    assert b.status == "ok" and b.truncated is True and len(b.text) <= 4000 and b.text.startswith("lorem ipsum")
    assert got.usage.content_fetches == 3
    # The request's own browser is gone.
    assert list(bclient.browsers.list()) == []

    # curl mode, as text; and `auto` goes to a browser when the provider gave no content.
    got = bclient.search.contents.fetch(s.id, result_ids=[moved.id, article.id],
                                        content={"source": "auto", "format": "text", "browser": {"mode": "curl"}})
    m, a = got.contents
    assert m.status == "ok" and m.method == "browser_curl" and m.final_url == f"{pages}/moved"
    assert a.status == "ok" and a.format == "text" and "Gliders of the north" in a.text and "#" not in a.text
    assert "Site navigation" not in a.text
    assert list(bclient.browsers.list()) == []

    # Neither HTML nor text.
    for mode in ("render", "curl"):
        got = bclient.search.contents.fetch(s.id, result_ids=[pdf.id],
                                            content={"source": "browser", "browser": {"mode": mode}})
        assert got.contents[0].status == "unsupported_type" and got.contents[0].text is None, got.contents[0]

    # The per-result timeout.
    got = bclient.search.contents.fetch(s.id, result_ids=[slow.id],
                                        content={"source": "browser", "timeout_ms": 1500})
    assert got.contents[0].status == "timeout" and got.contents[0].error.retryable is True
    assert list(bclient.browsers.list()) == []


def test_contents_in_the_callers_browser_keep_its_allowlist(bclient: Kernel, pages: str) -> None:
    s = bclient.search.create(query="local pages")
    article = s.results[0]
    browser = bclient.browsers.create(headless=True, network={"allowed_hosts": ["example.com"]})
    try:
        Pages.hits.clear()
        got = bclient.search.contents.fetch(
            s.id, result_ids=[article.id], content={"source": "browser", "browser": {"browser_id": browser.session_id}})
        c = got.contents[0]
        assert c.status in ("blocked", "error") and c.text is None and c.error is not None, c
        assert "/article" not in Pages.hits  # refused before it reached the page
        assert [b.session_id for b in bclient.browsers.list()] == [browser.session_id]  # the caller's stays
    finally:
        bclient.browsers.delete_by_id(browser.session_id)
    with pytest.raises(kernel.NotFoundError):
        bclient.search.contents.fetch(s.id, result_ids=[article.id],
                                      content={"source": "browser", "browser": {"browser_id": browser.session_id}})


def test_a_project_at_its_browser_limit_gets_429_unless_it_lends_its_own(bclient: Kernel, pages: str) -> None:
    project = bclient.projects.create(name="py-search-limited")
    bclient.projects.limits.update(project.id, max_concurrent_sessions=1)
    scoped = Kernel(api_key=bclient.api_key, base_url=bclient.base_url, project_id=project.id, max_retries=0,
                    timeout=120)
    first = scoped.browsers.create(headless=True)
    try:
        s = scoped.search.create(query="local pages")
        article = s.results[0]
        # The temporary browser counts toward the project's concurrency.
        with pytest.raises(kernel.RateLimitError):
            scoped.search.contents.fetch(s.id, result_ids=[article.id], content={"source": "browser"})
        # Its own browser serves instead, and stays.
        got = scoped.search.contents.fetch(s.id, result_ids=[article.id],
                                           content={"source": "browser", "browser": {"browser_id": first.session_id}})
        assert got.contents[0].status == "ok" and "rides the ridge lift" in got.contents[0].text
        assert [b.session_id for b in scoped.browsers.list()] == [first.session_id]
        # Another project's browser is a 404 from here.
        with pytest.raises(kernel.NotFoundError):
            bclient.search.contents.fetch(bclient.search.create(query="local pages").id, limit=1,
                                          content={"source": "browser", "browser": {"browser_id": first.session_id}})
    finally:
        scoped.browsers.delete_by_id(first.session_id)
    bclient.projects.delete(project.id)
