"""OTLP export of browser telemetry as the Python SDK 0.131 speaks it (kernel-api-0131.md §1E, §2.1),
against a real OpenTelemetry Collector (tests/tools/otelcol: the OTLP/HTTP receiver behind its
bearer-token authenticator and the file exporter, built by `make otelcol`) and real Chromium:
destination CRUD with write-only headers sealed at rest, the collector accepting only the sealed
credential (a refused one dropped, a rotated one used by the live session at once), the egress rule, a session's console and network events arriving with its resource
attributes, a collector stopped and started again (nothing lost within the queue bound; beyond it
the drops are counted and told by an `export_dropped` record), `/metrics` per destination, and
both OTLP/HTTP encodings (`export_encoding`: the servers here send protobuf, the default; one test
runs each encoding, JSON included, and checks which one went on the wire).

The server here is one of its own: its [server] fetch_allow lists the collector's port (the
default refuses loopback), and its queue is small so the bound is reached quickly.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

import kernel
from kernel import Kernel

from conftest import ALLOWED_PORTS, HANGAR_BIN, config_dir, launched, postgres, reply, serving, wait_for

OTELCOL = os.environ.get("HANGAR_OTELCOL") or str(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hangar-tools" / "otelcol-v0.165.0" / "hangar-otelcol")
QUEUE = 200  # [telemetry] export_queue_records of the server below
# The collector takes only requests carrying this (its bearertokenauth extension): what arrives
# there came with the destination's sealed header.
TOKEN = "otlp-ingest-" + os.urandom(8).hex()
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port(first: int, last: int) -> int:
    for port in range(first, last + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


class Collector:
    """The real collector: OTLP/HTTP on `port`, every log record appended to `file` as OTLP JSON."""

    def __init__(self, port: int, workdir: str):
        self.port = port
        self.file = os.path.join(workdir, "logs.jsonl")
        self.config = os.path.join(workdir, "otelcol.yaml")
        self.proc: subprocess.Popen[bytes] | None = None
        Path(self.config).write_text(f"""
extensions:
  bearertokenauth:
    token: "{TOKEN}"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
        auth:
          authenticator: bearertokenauth
exporters:
  file:
    path: {self.file}
    append: true
    flush_interval: 100ms
service:
  extensions: [bearertokenauth]
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
""")

    def start(self) -> None:
        self.proc = subprocess.Popen([OTELCOL, "--config", self.config], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

        def up() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(up, timeout=30, what="the collector's OTLP/HTTP port")

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(15)
            self.proc = None

    def records(self) -> list[dict]:
        """Every log record written so far, each with its resource's attributes under `resource`."""
        out: list[dict] = []
        if not os.path.exists(self.file):
            return out
        for line in Path(self.file).read_text().splitlines():
            if not line.strip():
                continue
            for rl in json.loads(line).get("resourceLogs", []):
                res = {a["key"]: next(iter(a["value"].values()), None) for a in rl["resource"].get("attributes", [])}
                for sl in rl.get("scopeLogs", []):
                    for rec in sl.get("logRecords", []):
                        out.append({**rec, "resource": res})
        return out


def body_of(record: dict) -> dict:
    """An OTLP kvlist body back as a plain dict of its scalar values."""
    values = record.get("body", {}).get("kvlistValue", {}).get("values", [])
    return {v["key"]: next(iter(v["value"].values()), None) for v in values}


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    if not os.path.exists(OTELCOL):
        pytest.fail(f"{OTELCOL} does not exist: run `make otelcol` (the collector the export tests send to)")
    with tempfile.TemporaryDirectory(prefix="hangar-otelcol-") as d:
        c = Collector(free_port(ALLOWED_PORTS[0] + 120, ALLOWED_PORTS[0] + 149), d)
        c.start()
        try:
            yield c
        finally:
            c.stop()


@pytest.fixture(scope="module")
def srv(collector: Collector) -> Iterator[object]:
    with tempfile.TemporaryDirectory(prefix="hangar-export-cfg-") as d:
        cfg = config_dir(d, {"fetch_allow": f"127.0.0.1:{collector.port}"}, {"telemetry": f"""
archive_interval_ms = 200
export_queue_records = {QUEUE}
export_batch_records = 50
export_backoff_ms = 100
export_backoff_max_ms = 500
export_timeout_ms = 2000
"""})
        with launched({"HANGAR_CONFIG": cfg}) as s:
            yield s


@pytest.fixture(scope="module")
def client(srv) -> Kernel:
    return kernel.Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=120, max_retries=0)


def metrics(client: Kernel) -> str:
    req = urllib.request.Request(str(client.base_url).rstrip("/") + "/metrics",
                                 headers={"Authorization": f"Bearer {client.api_key}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def counter(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    return 0.0


def test_destination_names_are_matched_ignoring_case_and_accents(client: Kernel, collector: Collector) -> None:
    """§1E: `name` is case- and accent-insensitive, for a lookup, the list filter and uniqueness."""
    d = client.telemetry.destinations.create(name="Café Export", endpoint=f"http://127.0.0.1:{collector.port}")
    try:
        assert client.telemetry.destinations.retrieve("cafe export").id == d.id
        assert client.telemetry.destinations.retrieve("CAFÉ EXPORT").id == d.id
        assert [x.id for x in client.telemetry.destinations.list(name="CAFE EXPORT")] == [d.id]
        assert [x.id for x in client.telemetry.destinations.list(query="fé exp")] == [d.id]
        with pytest.raises(kernel.ConflictError):
            client.telemetry.destinations.create(name="cafe export", endpoint=f"http://127.0.0.1:{collector.port}")
    finally:
        client.telemetry.destinations.delete(d.id)


def test_destinations_crud_with_write_only_sealed_headers(client: Kernel, srv, collector: Collector) -> None:
    endpoint = f"http://127.0.0.1:{collector.port}"
    d = client.telemetry.destinations.create(name="crud-dest", endpoint=endpoint + "/", description="first",
                                             headers={"x-honeycomb-team": "s3cr3t-ingest-key", "Authorization": "Bearer t0k"})
    try:
        assert d.endpoint == endpoint  # trailing slash dropped
        assert d.headers == {"X-Honeycomb-Team": "", "Authorization": ""}  # canonical names, values write-only
        assert d.consecutive_failures == 0 and d.description == "first" and d.last_export_at is None
        assert client.telemetry.destinations.retrieve("CRUD-DEST").id == d.id  # by name, case-insensitive
        assert [x.id for x in client.telemetry.destinations.list(query="crud")] == [d.id]
        assert [x.id for x in client.telemetry.destinations.list(name="nope")] == []
        other = client.telemetry.destinations.create(name="crud-other", endpoint=endpoint)
        try:
            first = client.telemetry.destinations.list(limit=1)
            # .items: iterating the page itself would fetch the following pages too
            assert [x.id for x in first.items] == [d.id] and first.has_next_page()
            assert [x.id for x in client.telemetry.destinations.list(limit=1, offset=1).items] == [other.id]
            # Renamed and pointed elsewhere (the endpoint is checked again).
            r = client.telemetry.destinations.update(other.id, name="crud-renamed", endpoint=endpoint + "/otlp")
            assert (r.name, r.endpoint) == ("crud-renamed", endpoint + "/otlp")
            with pytest.raises(kernel.BadRequestError, match="loopback"):
                client.telemetry.destinations.update(other.id, endpoint="http://127.0.0.1:1")
        finally:
            client.telemetry.destinations.delete(other.id)
        # PATCH merges headers per key: another spelling replaces, null deletes, the rest stays.
        u = client.telemetry.destinations.update(d.id, headers={"authorization": "Bearer rotated", "X-Honeycomb-Team": None},
                                                 description="second")
        assert u.headers == {"Authorization": ""} and u.description == "second"
        # Sealed at rest: no header value anywhere in the data dir.
        for path in Path(srv.data_dir).rglob("*"):
            if path.is_file() and path.stat().st_size < 200 * 1024 * 1024:
                data = path.read_bytes()
                for secret in (b"s3cr3t-ingest-key", b"Bearer rotated", b"Bearer t0k"):
                    assert secret not in data, f"{secret!r} in {path}"

        with pytest.raises(kernel.BadRequestError, match="signal path"):
            client.telemetry.destinations.create(name="signal", endpoint=endpoint + "/v1/logs")
        with pytest.raises(kernel.BadRequestError, match="endpoint"):
            client.telemetry.destinations.create(name="query", endpoint=endpoint + "?x=1")
        # Loopback not listed in fetch_allow: refused, as Kernel refuses non-public addresses.
        with pytest.raises(kernel.BadRequestError, match="loopback"):
            client.telemetry.destinations.create(name="loop", endpoint="http://127.0.0.1:1")
        with pytest.raises(kernel.BadRequestError, match="headers"):
            client.telemetry.destinations.create(name="dup", endpoint=endpoint, headers={"a": "1", "A": "2"})
        with pytest.raises(kernel.BadRequestError, match="id"):
            client.telemetry.destinations.create(name="abcdefghijklmnopqrstuvwx", endpoint=endpoint)
        with pytest.raises(kernel.ConflictError):
            client.telemetry.destinations.create(name="crud-dest", endpoint=endpoint)
        with pytest.raises(kernel.BadRequestError, match="telemetry.export.otlp.destination"):
            client.browsers.create(headless=True, telemetry={"browser": {"console": {}},
                                                             "export": {"otlp": {"destination": {"name": "nope"}}}})
        with pytest.raises(kernel.BadRequestError, match="storage"):
            client.browsers.create(headless=True, telemetry={"browser": {"console": {}}, "storage": {"enabled": False}})
    finally:
        client.telemetry.destinations.delete(d.id)
    with pytest.raises(kernel.NotFoundError):
        client.telemetry.destinations.retrieve(d.id)


def test_a_destination_a_managed_auth_connection_selects_is_not_deleted_or_renamed_under_it(
        client: Kernel, collector: Collector) -> None:
    """§1E: DELETE is 409 while a managed-auth connection selects the destination (by id or by
    name), and renaming is 409 while one selects it by name: its next login would find nothing."""
    endpoint = f"http://127.0.0.1:{collector.port}"
    by_name = client.telemetry.destinations.create(name="ma-by-name", endpoint=endpoint)
    by_id = client.telemetry.destinations.create(name="ma-by-id", endpoint=endpoint)

    def selecting(dest: dict) -> dict:
        return {"telemetry": {"browser": {"console": {}}, "export": {"otlp": {"destination": dest}}}}

    c1 = client.auth.connections.create(domain="ma-telemetry.example", profile_name="ma-telemetry-name",
                                        browser=selecting({"name": "MA-By-Name"}))
    c2 = client.auth.connections.create(domain="ma-telemetry.example", profile_name="ma-telemetry-id",
                                        browser=selecting({"id": by_id.id}))
    try:
        with pytest.raises(kernel.ConflictError, match=c1.id):
            client.telemetry.destinations.delete(by_name.id)
        with pytest.raises(kernel.ConflictError, match="by name"):
            client.telemetry.destinations.update("ma-by-name", name="ma-renamed")
        # What is not the name still changes (the credential-rotation path).
        assert client.telemetry.destinations.update(by_name.id, description="rotated").description == "rotated"
        # Selected by id: a rename is harmless, a delete is not.
        assert client.telemetry.destinations.update(by_id.id, name="ma-by-id-2").name == "ma-by-id-2"
        with pytest.raises(kernel.ConflictError, match=c2.id):
            client.telemetry.destinations.delete(by_id.id)
        # Once no connection selects them, they go.
        client.auth.connections.update(c1.id, browser={"telemetry": None})
        assert client.telemetry.destinations.update(by_name.id, name="ma-renamed").name == "ma-renamed"
        client.telemetry.destinations.delete(by_name.id)
        client.auth.connections.delete(c2.id)
        client.telemetry.destinations.delete(by_id.id)
    finally:
        for c in (c1, c2):
            try:
                client.auth.connections.delete(c.id)
            except kernel.NotFoundError:
                pass
        for d in (by_name, by_id):
            try:
                client.telemetry.destinations.delete(d.id)
            except kernel.NotFoundError:
                pass


def test_destinations_are_the_organisations(client: Kernel, srv, collector: Collector) -> None:
    """§1E: destinations are org-level. Names are unique in the org; a project-scoped key lists and
    reads them (to select one) but writes nothing (403); a browser and a pool of another project of
    the org select one by name; the project that made one can still be deleted."""
    endpoint = f"http://127.0.0.1:{collector.port}"
    project = client.projects.create(name="py-export-other")
    made = client.api_keys.create(name="py-export-scoped", project_id=project.id)
    d = client.telemetry.destinations.create(name="org-dest", endpoint=endpoint)
    try:
        scoped = Kernel(api_key=made.key, base_url=srv.base_url, timeout=120, max_retries=0)
        assert d.id in [x.id for x in scoped.telemetry.destinations.list()]
        assert scoped.telemetry.destinations.retrieve("ORG-DEST").id == d.id
        with pytest.raises(kernel.PermissionDeniedError):
            scoped.telemetry.destinations.create(name="scoped-dest", endpoint=endpoint)
        with pytest.raises(kernel.PermissionDeniedError):
            scoped.telemetry.destinations.update(d.id, description="from a project key")
        with pytest.raises(kernel.PermissionDeniedError):
            scoped.telemetry.destinations.delete(d.id)
        # The org key acting in the other project sees the same one, and the name is taken there too.
        chosen = Kernel(api_key=srv.api_key, base_url=srv.base_url, project_id=project.id, timeout=120, max_retries=0)
        assert chosen.telemetry.destinations.retrieve(d.id).name == "org-dest"
        with pytest.raises(kernel.ConflictError):
            chosen.telemetry.destinations.create(name="Org-Dest", endpoint=endpoint)
        made_there = chosen.telemetry.destinations.create(name="org-dest-2", endpoint=endpoint)
        assert made_there.id in [x.id for x in client.telemetry.destinations.list(name="org-dest-2")]
        # Selected from the other project's browsers and pools.
        capture = {"browser": {"console": {}}, "export": {"otlp": {"destination": {"name": "org-dest"}}}}
        b = scoped.browsers.create(headless=True, telemetry=capture)
        try:
            assert b.telemetry.export.otlp.destination == d.id
        finally:
            scoped.browsers.delete_by_id(b.session_id)
        pool = scoped.browser_pools.create(name="py-export-org-pool", size=0, headless=True, telemetry=capture)
        scoped.browser_pools.delete(pool.id, force=True)
        delete_when_unbound(client, d.id)
        # A destination made while acting in a project is no resource of that project.
        client.api_keys.delete(made.id)
        wait_for(lambda: delete_project(client, project.id), timeout=30, what="the other project deleted")
        assert client.telemetry.destinations.retrieve(made_there.id).name == "org-dest-2"
        client.telemetry.destinations.delete(made_there.id)
    finally:
        for cleanup in (lambda: client.api_keys.delete(made.id), lambda: client.telemetry.destinations.delete(d.id),
                        lambda: client.telemetry.destinations.delete("org-dest-2"),
                        lambda: client.projects.delete(project.id)):
            try:
                cleanup()
            except (kernel.NotFoundError, kernel.ConflictError):
                pass


def delete_project(client: Kernel, project_id: str) -> bool:
    try:
        client.projects.delete(project_id)
        return True
    except kernel.ConflictError:
        return False


def run(client: Kernel, session_id: str, code: str) -> object:
    r = client.browsers.playwright.execute(session_id, code=code, timeout_sec=60)
    assert r.success is True, r
    return r.result


def test_console_and_network_events_reach_the_collector(client: Kernel, collector: Collector, page_url: str) -> None:
    d = client.telemetry.destinations.create(name="live", endpoint=f"http://127.0.0.1:{collector.port}", headers=AUTH)
    b = client.browsers.create(headless=True, telemetry={
        "browser": {"console": {"enabled": True}, "network": {"enabled": True}},
        "export": {"otlp": {"destination": {"name": "live"}}}})
    try:
        assert b.telemetry.export.otlp.destination == d.id and b.telemetry.export.otlp.enabled is True
        assert b.telemetry.storage.enabled is True
        # A destination a live session exports to cannot go.
        with pytest.raises(kernel.ConflictError):
            client.telemetry.destinations.delete(d.id)
        run(client, b.session_id, f"await page.goto({json.dumps(page_url)});"
                                  "await page.evaluate(() => console.log('hello-otlp')); return 1;")

        def mine() -> list[dict]:
            return [r for r in collector.records() if r["resource"].get("kernel.browser.session_id") == b.session_id]

        wait_for(lambda: {"console_log", "network_request", "network_response"} <= {r.get("eventName") for r in mine()},
                 timeout=30, what="console and network records at the collector")
        recs = mine()
        res = recs[0]["resource"]
        assert res["service.name"] == "hangar-browser"
        project = client.browsers.retrieve(b.session_id)  # the session's project is the key's
        assert res["kernel.project.id"], res
        console = [r for r in recs if r["eventName"] == "console_log"]
        assert any("hello-otlp" in json.dumps(body_of(r)) for r in console), console
        req = next(r for r in recs if r["eventName"] == "network_request" and page_url in json.dumps(r))
        attrs = {a["key"]: next(iter(a["value"].values())) for a in req["attributes"]}
        assert attrs["kernel.telemetry.category"] == "network" and attrs["event.name"] == "network_request"
        assert int(req["timeUnixNano"]) > 1_600_000_000 * 10**9
        # The same events are in the archive (storage on).
        archived = [e.event.type for e in client.browsers.telemetry.events(b.session_id, since="10m", limit=1000)]
        assert "console_log" in archived
        got = client.telemetry.destinations.retrieve(d.id)
        assert got.last_export_at is not None and got.consecutive_failures == 0
        text = metrics(client)
        assert counter(text, "hangar_telemetry_export_records_total", destination=d.id, outcome="sent") >= len(recs)
        assert project.session_id == b.session_id
        # Export off by PATCH, then the destination can be deleted once the session ends.
        u = client.browsers.update(b.session_id, telemetry={"export": {"otlp": {"enabled": False}}})
        assert u.telemetry.export is None or u.telemetry.export.otlp is None
    finally:
        client.browsers.delete_by_id(b.session_id)
    delete_when_unbound(client, d.id)


def delete_when_unbound(client: Kernel, destination_id: str) -> None:
    """A deleted browser's session ends a moment after the 204 (its last telemetry is pulled and
    exported first); until then its destination answers 409."""

    def gone() -> bool:
        try:
            client.telemetry.destinations.delete(destination_id)
            return True
        except kernel.ConflictError:
            return False

    wait_for(gone, timeout=30, what="the destination free to delete")


def console_lines(client: Kernel, session_id: str, tag: str, n: int) -> None:
    # In the page (console.log in the code itself would be the executor's own stdout).
    run(client, session_id, f"await page.evaluate(() => {{ for (let i = 0; i < {n}; i++) console.log('{tag}-' + i); }});"
                            f"return {n};")


def markers(collector: Collector, session_id: str, tag: str) -> list[str]:
    out = []
    for r in collector.records():
        if r["resource"].get("kernel.browser.session_id") != session_id or r.get("eventName") != "console_log":
            continue
        text = json.dumps(body_of(r))
        out += sorted(set(re.findall(rf"{tag}-\d+", text)))  # a line's text may show in several fields
    return out


def archived(client: Kernel, session_id: str, text: str) -> bool:
    events = client.browsers.telemetry.events(session_id, since="10m", category=["console"], limit=5000)
    return any(text in (e.event.data.text or "") for e in events)


def dropped_notes(collector: Collector, session_id: str) -> int:
    return sum(int(body_of(r)["count"]) for r in collector.records()
               if r["resource"].get("kernel.browser.session_id") == session_id and r.get("eventName") == "export_dropped")


def test_a_collector_restart_loses_nothing_within_the_bound_and_counts_drops_beyond(
        client: Kernel, collector: Collector, page_url: str) -> None:
    d = client.telemetry.destinations.create(name="restart", endpoint=f"http://127.0.0.1:{collector.port}", headers=AUTH)
    b = client.browsers.create(headless=True, telemetry={"browser": {"console": {"enabled": True}},
                                                         "export": {"otlp": {"destination": {"id": d.id}}}})
    try:
        run(client, b.session_id, f"await page.goto({json.dumps(page_url)}); return 1;")
        console_lines(client, b.session_id, "warm", 5)
        wait_for(lambda: len(markers(collector, b.session_id, "warm")) == 5, what="the first records")

        # Within the bound: the collector goes away, 100 lines wait and arrive once it is back.
        collector.stop()
        console_lines(client, b.session_id, "within", 100)
        wait_for(lambda: counter(metrics(client), "hangar_telemetry_export_retries_total", destination=d.id) > 0,
                 what="a retry while the collector is down")
        failing = client.telemetry.destinations.retrieve(d.id)
        assert failing.consecutive_failures > 0 and failing.last_error == "connection_failed", failing
        collector.start()
        wait_for(lambda: len(set(markers(collector, b.session_id, "within"))) == 100, timeout=60,
                 what="all 100 lines after the restart")
        assert counter(metrics(client), "hangar_telemetry_export_records_total", destination=d.id, outcome="dropped") == 0
        assert client.telemetry.destinations.retrieve(d.id).consecutive_failures == 0

        # Beyond the bound: 1000 lines against a queue of 200 while it is down; what is dropped is
        # counted in /metrics and told by export_dropped records, and everything is accounted for.
        collector.stop()
        console_lines(client, b.session_id, "beyond", 1000)
        wait_for(lambda: counter(metrics(client), "hangar_telemetry_export_records_total", destination=d.id,
                                 outcome="dropped") > 0, what="drops counted")
        # Every line was pulled (a pull queues its records before it archives them), so none comes late.
        wait_for(lambda: archived(client, b.session_id, "beyond-999"), what="the 1000 lines pulled")
        collector.start()
        # The backlog goes out first: a record that found the queue still full would be dropped too.
        wait_for(lambda: counter(metrics(client), "hangar_telemetry_export_queue_records", destination=d.id) == 0,
                 what="the queue delivered")
        dropped = counter(metrics(client), "hangar_telemetry_export_records_total", destination=d.id, outcome="dropped")
        console_lines(client, b.session_id, "after", 1)  # the next record brings the note along
        wait_for(lambda: markers(collector, b.session_id, "after"), timeout=60, what="a record after the restart")
        got = set(markers(collector, b.session_id, "beyond"))
        assert 0 < len(got) < 1000, len(got)
        assert len(got) + dropped_notes(collector, b.session_id) == 1000, (len(got), dropped_notes(collector, b.session_id))
        assert dropped >= 1000 - len(got), (dropped, len(got))
    finally:
        client.browsers.delete_by_id(b.session_id)
        if collector.proc is None:
            collector.start()
    delete_when_unbound(client, d.id)


def test_a_pool_exports_its_leases_telemetry(client: Kernel, collector: Collector, page_url: str) -> None:
    d = client.telemetry.destinations.create(name="pool-dest", endpoint=f"http://127.0.0.1:{collector.port}",
                                             headers=AUTH)
    capture = {"browser": {"console": {"enabled": True}}}
    with pytest.raises(kernel.BadRequestError, match="telemetry.export.otlp.destination"):
        client.browser_pools.create(name="pool-bad", size=1, headless=True,
                                    telemetry={**capture, "export": {"otlp": {"destination": {"name": "nope"}}}})
    pool = client.browser_pools.create(name="pool-export", size=1, headless=True,
                                       telemetry={**capture, "export": {"otlp": {"destination": {"name": "pool-dest"}}}})
    try:
        b = client.browser_pools.acquire(pool.id, acquire_timeout_seconds=50)
        assert b is not None and b.telemetry.export.otlp.destination == d.id, b
        run(client, b.session_id, f"await page.goto({json.dumps(page_url)});"
                                  "await page.evaluate(() => console.log('pooled-1')); return 1;")
        wait_for(lambda: markers(collector, b.session_id, "pooled"), what="the lease's console line at the collector")
        client.browser_pools.release(pool.id, session_id=b.session_id, reuse=False)
    finally:
        client.browser_pools.delete(pool.id, force=True)
    delete_when_unbound(client, d.id)


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP receiver (a double: the real collector says neither which encoding it
    was sent nor lets a test make it answer a partial success). It keeps what each request carried
    and answers in the request's encoding that one record of it was rejected."""

    requests: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        kind = self.headers.get("content-type", "")
        type(self).requests.append((self.path, kind, body))
        # ExportLogsServiceResponse{partial_success (1): {rejected_log_records (1): 1}}, by hand.
        answer = b"\x0a\x02\x08\x01" if kind == "application/x-protobuf" else \
            json.dumps({"partialSuccess": {"rejectedLogRecords": "1"}}).encode()
        reply(self, 200, answer, kind)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_each_encoding_goes_on_the_wire_and_reaches_the_collector(collector: Collector, page_url: str,
                                                                   encoding: str) -> None:
    """`export_encoding`: unset means protobuf (OTLP/HTTP's default); `json` sends OTLP JSON. The
    stand-in receiver sees the Content-Type and body of each, and its partial success is read in
    the same encoding (the rejected record counted as dropped); the real collector takes both."""
    receiver = type("Receiver", (_Receiver,), {"requests": []})
    with serving(receiver, range(ALLOWED_PORTS[0] + 100, ALLOWED_PORTS[0] + 120)) as port, \
            tempfile.TemporaryDirectory(prefix="hangar-export-cfg-") as d:
        setting = "" if encoding == "protobuf" else "export_encoding = json"
        cfg = config_dir(d, {"fetch_allow": f"127.0.0.1:{collector.port},127.0.0.1:{port}"},
                         {"telemetry": f"archive_interval_ms = 200\n{setting}"})
        with launched({"HANGAR_CONFIG": cfg}) as s:
            c = kernel.Kernel(api_key=s.api_key, base_url=s.base_url, timeout=120, max_retries=0)
            double = c.telemetry.destinations.create(name="double", endpoint=f"http://127.0.0.1:{port}")
            real = c.telemetry.destinations.create(name="real", endpoint=f"http://127.0.0.1:{collector.port}",
                                                   headers=AUTH)
            b = c.browsers.create(headless=True, telemetry={"browser": {"console": {"enabled": True}},
                                                            "export": {"otlp": {"destination": {"id": double.id}}}})
            try:
                run(c, b.session_id, f"await page.goto({json.dumps(page_url)}); return 1;")
                console_lines(c, b.session_id, f"wire-{encoding}", 3)
                wait_for(lambda: any(f"wire-{encoding}-2".encode() in body for _, _, body in receiver.requests),
                         what="the lines at the stand-in receiver")
                for path, kind, body in receiver.requests:
                    assert path == "/v1/logs"
                    if encoding == "protobuf":
                        # ExportLogsServiceRequest: field 1 (resource_logs), length-delimited.
                        assert kind == "application/x-protobuf" and body[:1] == b"\x0a", (kind, body[:40])
                        assert b"hangar-browser" in body and b.session_id.encode() in body
                    else:
                        assert kind == "application/json", kind
                        assert json.loads(body)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
                # One record of each request was rejected: counted as dropped, the rest as sent.
                wait_for(lambda: counter(metrics(c), "hangar_telemetry_export_records_total", destination=double.id,
                                         outcome="dropped") == len(receiver.requests) > 0,
                         what="the partial successes counted")
                # The real collector decodes the same encoding.
                c.browsers.update(b.session_id, telemetry={"export": {"otlp": {"destination": {"id": real.id}}}})
                console_lines(c, b.session_id, f"real-{encoding}", 3)
                wait_for(lambda: len(markers(collector, b.session_id, f"real-{encoding}")) == 3,
                         what="the lines at the real collector")
                assert counter(metrics(c), "hangar_telemetry_export_records_total", destination=real.id,
                               outcome="dropped") == 0
            finally:
                c.browsers.delete_by_id(b.session_id)


def test_an_unknown_export_encoding_refuses_to_start(tmp_path: Path) -> None:
    """A misspelt `export_encoding` stops the server at start, naming the setting, instead of
    exporting in an encoding the operator did not choose."""
    cfg = config_dir(str(tmp_path / "etc"), {}, {"telemetry": "export_encoding = grpc"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_")}
    env.update(HANGAR_CONFIG=cfg, HANGAR_LISTEN="127.0.0.1:0", HANGAR_DATA_DIR=str(tmp_path / "data"),
               HANGAR_API_KEY="sk_test_" + os.urandom(24).hex(), HANGAR_WARM_SPARES="0")
    r = subprocess.run([HANGAR_BIN, "serve"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "export_encoding" in r.stdout + r.stderr and "grpc" in r.stdout + r.stderr, r.stdout + r.stderr


def test_a_refused_credential_is_dropped_and_a_rotated_one_applies_at_once(
        client: Kernel, collector: Collector, page_url: str) -> None:
    d = client.telemetry.destinations.create(name="rotate", endpoint=f"http://127.0.0.1:{collector.port}",
                                             headers={"Authorization": "Bearer wrong"})
    b = client.browsers.create(headless=True, telemetry={"browser": {"console": {"enabled": True}},
                                                         "export": {"otlp": {"destination": {"id": d.id}}}})
    try:
        run(client, b.session_id, f"await page.goto({json.dumps(page_url)}); return 1;")
        console_lines(client, b.session_id, "refused", 3)

        def refused():
            got = client.telemetry.destinations.retrieve(d.id)
            return got if got.last_error == "unauthorized" else None

        got = wait_for(refused, what="the collector's 401 recorded")
        assert got.consecutive_failures > 0 and got.last_export_at is None
        # A 401 is not retried: the batch is dropped and counted.
        wait_for(lambda: counter(metrics(client), "hangar_telemetry_export_records_total", destination=d.id,
                                 outcome="dropped") >= 3, what="the refused records counted as dropped")
        assert counter(metrics(client), "hangar_telemetry_export_retries_total", destination=d.id) == 0
        # The credential-rotation path: the live session's next request carries the new value.
        client.telemetry.destinations.update(d.id, headers={"authorization": f"Bearer {TOKEN}"})
        console_lines(client, b.session_id, "rotated", 3)
        wait_for(lambda: len(markers(collector, b.session_id, "rotated")) == 3, what="records after the rotation")
        assert not markers(collector, b.session_id, "refused")
        assert client.telemetry.destinations.retrieve(d.id).consecutive_failures == 0
    finally:
        client.browsers.delete_by_id(b.session_id)
    delete_when_unbound(client, d.id)


@pytest.mark.slow  # ~20 s: a PostgreSQL, two nodes and a browser
def test_in_a_cluster_the_node_that_owns_the_browser_exports(collector: Collector, page_url: str, tmp_path: Path) -> None:
    """Two nodes on one PostgreSQL: a browser made on node-b, its export switched on through
    node-a (relayed to the owner), every record exported by node-b."""
    key = "sk_test_" + os.urandom(24).hex()
    with postgres(free_port(25500, 25599)) as store, tempfile.TemporaryDirectory(prefix="hangar-export-cfg-") as d:
        cfg = config_dir(d, {"fetch_allow": f"127.0.0.1:{collector.port}"}, {"telemetry": "archive_interval_ms = 200"})
        common = {"HANGAR_CONFIG": cfg, "HANGAR_STORE_URL": store, "HANGAR_API_KEY": key,
                  "HANGAR_SECRETS_KEY_FILE": str(tmp_path / "secrets.key"), "HANGAR_NODE_HEARTBEAT_SECONDS": "1"}
        ports = [free_port(25600, 25699)]
        ports.append(free_port(ports[0] + 1, 25699))

        def node(name: str, port: int) -> dict[str, str]:
            return {**common, "HANGAR_NODE_NAME": name, "HANGAR_LISTEN": f"127.0.0.1:{port}",
                    "HANGAR_PUBLIC_URL": f"http://127.0.0.1:{port}"}

        with launched(node("node-a", ports[0])) as a, launched(node("node-b", ports[1])) as b:
            ca = kernel.Kernel(api_key=key, base_url=a.base_url, timeout=120, max_retries=0)
            cb = kernel.Kernel(api_key=key, base_url=b.base_url, timeout=120, max_retries=0)
            dest = ca.telemetry.destinations.create(name="cluster", endpoint=f"http://127.0.0.1:{collector.port}",
                                                    headers=AUTH)
            br = cb.browsers.create(headless=True, telemetry={"browser": {"console": {"enabled": True}}})
            try:
                u = ca.browsers.update(br.session_id, telemetry={"export": {"otlp": {"destination": {"name": "cluster"}}}})
                assert u.telemetry.export.otlp.destination == dest.id
                run(cb, br.session_id, f"await page.goto({json.dumps(page_url)});"
                                       "await page.evaluate(() => console.log('clustered-1')); return 1;")
                wait_for(lambda: markers(collector, br.session_id, "clustered"), what="the record at the collector")
                nodes = {r["resource"].get("hangar.node") for r in collector.records()
                         if r["resource"].get("kernel.browser.session_id") == br.session_id}
                assert nodes == {"node-b"}, nodes
                assert counter(metrics(ca), "hangar_telemetry_export_records_total", destination=dest.id, outcome="sent") == 0
                assert counter(metrics(cb), "hangar_telemetry_export_records_total", destination=dest.id, outcome="sent") > 0
            finally:
                cb.browsers.delete_by_id(br.session_id)


def test_a_stopping_server_sends_what_its_last_pull_queued(collector: Collector, page_url: str) -> None:
    with tempfile.TemporaryDirectory(prefix="hangar-export-cfg-") as d:
        cfg = config_dir(d, {"fetch_allow": f"127.0.0.1:{collector.port}"},
                         {"telemetry": "archive_interval_ms = 60000"})
        with launched({"HANGAR_CONFIG": cfg}) as s:
            c = kernel.Kernel(api_key=s.api_key, base_url=s.base_url, timeout=120, max_retries=0)
            dest = c.telemetry.destinations.create(name="drain", endpoint=f"http://127.0.0.1:{collector.port}",
                                                   headers=AUTH)
            b = c.browsers.create(headless=True, telemetry={"browser": {"console": {"enabled": True}},
                                                            "export": {"otlp": {"destination": {"id": dest.id}}}})
            run(c, b.session_id, f"await page.goto({json.dumps(page_url)}); return 1;")
            console_lines(c, b.session_id, "drained", 20)
            # No pull has run yet (a minute apart): the stop's own pull queues the lines, and the
            # stop waits for them to go out.
            assert not markers(collector, b.session_id, "drained")
        wait_for(lambda: len(markers(collector, b.session_id, "drained")) == 20, timeout=10,
                 what="the lines queued by the stop at the collector")
