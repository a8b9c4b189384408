"""A real searx 0.17.0 (`make searx`) answering SearXNG's JSON API from a local corpus, for the
tests that need a search backend (tests/python/test_0131_search.py, tests/api/fuzz_api.py). The
network is closed here, so searx's one engine is a `json_engine` pointed at `Corpus`, served by
the caller: the answers Hangar parses are searx's own."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

DEFAULT_PYTHON = "/root/.cache/hangar-tools/searx-0.17.0/venv/bin/python"


def python() -> str:
    return os.environ.get("HANGAR_SEARX") or DEFAULT_PYTHON


class Corpus(http.server.BaseHTTPRequestHandler):
    """The engine searx queries: `n<count>` in the query asks for that many results (default 25);
    every third result has no body (searx then has no content for it); `nothing` finds nothing;
    `slow` answers after 3 s; `local` answers `Corpus.local` (the pages a contents test serves), with
    no body, so only a browser has their content."""

    local: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("q", [""])[0]
        if "local" in q:
            self._answer([{"url": u, "title": f"local page {i}"} for i, u in enumerate(Corpus.local, 1)])
            return
        count = 25
        for word in q.split():
            if word.startswith("n") and word[1:].isdigit():
                count = int(word[1:])
        if "nothing" in q:
            count = 0
        if "slow" in q:
            time.sleep(3)
        results = []
        for i in range(1, count + 1):
            r = {"url": f"https://{'docs' if i % 2 else 'blog'}.example.org/{q.replace(' ', '-')}/{i}",
                 "title": f"{q} result {i}"}
            if i % 3:
                r["body"] = f"snippet {i} about {q}"
            results.append(r)
        self._answer(results)

    def _answer(self, results: list[dict]) -> None:
        body = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


SETTINGS = """
general: {{debug: false, instance_name: hangar-test}}
search: {{safe_search: 0, autocomplete: "", default_lang: "", formats: [html, json]}}
server: {{port: {port}, bind_address: "127.0.0.1", secret_key: "hangar-test-only", base_url: false,
          image_proxy: false, http_protocol_version: "1.0"}}
ui: {{static_path: "", templates_path: "", default_theme: oscar, default_locale: "",
      theme_args: {{oscar_style: logicodev}}}}
outgoing: {{request_timeout: 5.0, pool_connections: 10, pool_maxsize: 10}}
engines:
  - name: local corpus
    engine: json_engine
    shortcut: lc
    categories: general
    search_url: http://127.0.0.1:{corpus}/api?q={{query}}
    results_query: results
    url_query: url
    title_query: title
    content_query: body
locales: {{en: English}}
doi_resolvers: {{oadoi.org: 'https://oadoi.org/'}}
default_doi_resolver: 'oadoi.org'
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(corpus_port: int, timeout: float = 60) -> Iterator[str]:
    """searx querying the corpus on `corpus_port`; its base URL once it answers a search."""
    with tempfile.TemporaryDirectory(prefix="hangar-searx-") as d:
        port = free_port()
        Path(d, "settings.yml").write_text(SETTINGS.format(port=port, corpus=corpus_port))
        env = dict(os.environ, SEARX_SETTINGS_PATH=str(Path(d, "settings.yml")))
        proc = subprocess.Popen([python(), "-m", "searx.webapp"], env=env, cwd=d, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + timeout
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/search?q=n1&format=json", timeout=5) as r:
                        if json.load(r)["results"]:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"searx did not answer a search within {timeout:.0f} s")
                time.sleep(0.25)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
