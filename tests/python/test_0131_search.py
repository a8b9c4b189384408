"""Web search (kernel-api-0131.md §1C) through the official Python SDK 0.131 against a real
metasearch server: searx 0.17.0, SearXNG's predecessor with the same `GET /search?format=json`
API (SearXNG itself is not on PyPI; `make searx` installs searx under
/root/.cache/hangar-tools/). The network is closed here, so searx's one engine is its own
`json_engine` pointed at a small local corpus this test serves: the answers Hangar parses are
searx's, not a double's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

import kernel
from kernel import Kernel

from conftest import REPO, launched, serving

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
    # A page fetched through a browser is not done yet: 501 naming what is missing.
    for content in ({"source": "browser"}, {"source": "auto"}):
        status, body = raw(client, "POST", f"/search/{s.id}/contents",
                           {"result_ids": [s.results[2].id], "content": content})
        assert status == 501 and body["code"] == "not_implemented"
        assert "browser" in body["message"]
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
