#!/usr/bin/env python3
"""Schemathesis against a real `hangar serve`, driven by the server's own GET /openapi.json.

    fuzz_api.py [--examples N] [--max-time S] [--phases P] [--seed N]

Starts the server on a free port with a fresh data dir and a random key; browsers are bounded so
the run fits 2 cores (no warm spares, one browser per project: further creates get 429, short
idle timeouts); runs `schemathesis run` with positive and negative data and the checks below;
seeds one real resource of each kind first (a small headful browser with a process on a PTY, one
that has exited, a watch, a custom WebMCP tool, the files the fs examples name and a finished
replay; a saved profile, proxy, credential with a TOTP secret, project, API key, pool, extension,
auth connection (and one no login ever starts, for its events), credential provider, app
deployment and an invocation of it, vault with an item and one pending collection (its form's
token), vault provider config, OTLP and audit-log export destination; a second of each kind that
a DELETE or kill ends, for it) and pins every id path parameter and capability token (the jwt of
cdp_ws_url and of webdriver_ws_url, the live view's, a replay's, a collection form's) to them, so
the id routes and the browser sub-resources (fs, process, computer, playwright, logs, replays,
curl) run for real instead of answering 404 (`follow` is pinned to "false": a followed log stream
never ends). The stateful phase chains the OpenAPI links of the create operations (POST /browsers →
GET/PATCH/DELETE /browsers/{id_or_name}, ...). Counts every request it sent (from the NDJSON
report), writes each operation's statuses to coverage.txt and fails on any server error (5xx) or
response-schema violation. The server's log goes to build/api-fuzz/hangar.log.

The app is JavaScript with its node_modules in the archive (the SDK's runtime files from
tests/e2e/node_modules, `make setup-npm`), so its build runs no npm; the credential provider's
Connect server is a small test double in this process (start_connect_double).
"""
import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import io
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tools" / "searx"))
import searx_server  # noqa: E402  (a real searx for the /search routes, as the Python SDK tests use)
VENV_BIN = HERE / ".venv" / "bin"
# What must hold: no 5xx (hooks.py: 501 not_implemented aside), every answer matches its
# documented schema, status, headers and content type.
CHECKS = "no_server_error,response_schema_conformance,status_code_conformance,content_type_conformance,response_headers_conformance"


CONNECT_TOKEN = "fuzz-connect-token"


def serve(handler) -> int:
    """`handler` served on a free loopback port, in threads that end with this process; the port."""
    import http.server
    import threading
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


def start_connect_double() -> str:
    """TEST DOUBLE, not 1Password: the three GET routes of the 1Password Connect API the
    credential providers call (as tests/e2e/lib/connect-double.mjs), one vault with one login, so
    the seeded provider's /test and /items answer 200 instead of 502 for a Connect that is not
    there (no real Connect server runs on these machines)."""
    import http.server
    item = {"id": "fuzzitem", "title": "fuzz login", "category": "LOGIN", "vault": {"id": "fuzzvault"},
            "urls": [{"href": "https://example.test", "primary": True}],
            "fields": [{"id": "username", "type": "STRING", "purpose": "USERNAME", "label": "username", "value": "u"},
                       {"id": "password", "type": "CONCEALED", "purpose": "PASSWORD", "label": "password", "value": "p"}]}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def do_GET(self):
            parts = [urllib.parse.unquote(x) for x in urllib.parse.urlparse(self.path).path.split("/") if x]
            status, body = 404, {"status": 404, "message": "Not found"}
            if self.headers.get("Authorization") != "Bearer " + CONNECT_TOKEN:
                status, body = 401, {"status": 401, "message": "Invalid token"}
            elif parts == ["v1", "vaults"]:
                status, body = 200, [{"id": "fuzzvault", "name": "Fuzz Vault", "type": "USER_CREATED", "items": 1}]
            elif parts == ["v1", "vaults", "fuzzvault", "items"]:
                status, body = 200, [{k: v for k, v in item.items() if k != "fields"}]
            elif parts == ["v1", "vaults", "fuzzvault", "items", "fuzzitem"]:
                status, body = 200, item
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return f"http://127.0.0.1:{serve(Handler)}"


def start_target() -> int:
    """A site the seeded browser can reach (its port is the one host port the server forwards into
    instances), so curl/raw answers with a target's own response instead of only the gateway's
    502/504: every method answers 200 with a short text body."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            data = b"fuzz target"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = answer

    return serve(Handler)


def start_server(binary: Path, out_dir: Path, connect_url: str, target_port: int, searx_url: str | None):
    data_dir = Path(tempfile.mkdtemp(prefix="hangar-api-fuzz-"))
    config = {}
    if searx_url:
        # The repository's configuration with the search plugin pointed at the running searx.
        shutil.copytree(ROOT / "etc", data_dir / "etc")
        ini = data_dir / "etc" / "plugins.d" / "search.ini"
        ini.write_text(ini.read_text() + f"\nsearxng_url = {searx_url}\nsearxng_max_results = 10\n")
        config["HANGAR_CONFIG"] = str(data_dir / "etc" / "hangar.ini")
    key = "sk_fuzz_" + secrets.token_hex(16)
    env = dict(os.environ,
               HANGAR_LISTEN="127.0.0.1:0",
               HANGAR_DATA_DIR=str(data_dir),
               HANGAR_API_KEY=key,
               HANGAR_WARM_SPARES="0",
               HANGAR_KEEP_SESSIONS_ON_STOP="0",  # its SIGTERM ends every session
               HANGAR_MAX_BROWSERS_PER_PROJECT="6",  # the seeded ones take four
               HANGAR_SANDBOX_ALLOW_HOST_PORTS=str(target_port),
               # The Connect double's port is the loopback address outbound fetches reach; the
               # seeded proxy's and the openapi.yaml examples' collector (4318), S3 (9000) and
               # Connect (8080) addresses are admitted too, so those examples are created (what is
               # sent there later fails: nothing listens).
               HANGAR_FETCH_ALLOW=",".join([urllib.parse.urlparse(connect_url).netloc, "127.0.0.1:9",
                                            f"127.0.0.1:{target_port}",  # a config-registry analysis's target
                                            "127.0.0.1:4318", "127.0.0.1:9000", "127.0.0.1:8080"]),
               HANGAR_LOG_LEVEL="information", **config)
    log = open(out_dir / "hangar.log", "w")
    proc = subprocess.Popen([str(binary), "serve"], env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.time() + 60
    url = None
    for line in proc.stdout:
        log.write(line)
        log.flush()
        m = re.search(r"hangar listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            url = m.group(1)
            break
        if time.time() > deadline:
            break
    if not url:
        proc.kill()
        raise SystemExit("hangar did not start; see " + str(out_dir / "hangar.log"))
    # Keep draining stdout so the server never blocks on a full pipe.
    import threading
    threading.Thread(target=lambda: [log.write(l) for l in proc.stdout], daemon=True).start()
    return proc, url, key, data_dir


def call(url: str, key: str, method: str, path: str, body=None, content_type="application/json", raw=None,
         raw_answer=False):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Authorization": "Bearer " + key}
    if data is not None:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=120) as res:
        text = res.read()
        return text if raw_answer else json.loads(text) if text else None


def tiny_extension_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("manifest.json", json.dumps({"manifest_version": 3, "name": "api-fuzz", "version": "1.0"}))
    return buf.getvalue()


SDK_DIR = ROOT / "tests" / "e2e" / "node_modules" / "@onkernel" / "sdk"


def tiny_app_zip(name: str) -> bytes:
    """A JavaScript Kernel app with its node_modules in the archive and no lockfile: the build
    uses them as they are (no npm, no registry). Only the SDK's runtime files go in (no maps,
    no typings): about 900 KB. The SDK comes from the e2e tests' install (make setup-npm)."""
    if not (SDK_DIR / "package.json").exists():
        raise SystemExit(f"{SDK_DIR} is missing: run `make setup-npm`")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("package.json", json.dumps({"name": name, "private": True, "type": "module"}))
        z.writestr("index.mjs", "import Kernel from '@onkernel/sdk';\n"
                                f"const app = new Kernel().app({json.dumps(name)});\n"
                                "app.action('echo', async (ctx, payload) => ({ payload: payload ?? null }));\n")
        for f in sorted(SDK_DIR.rglob("*")):
            rel = f.relative_to(SDK_DIR)
            if f.is_file() and rel.parts[0] != "src" and (f.name == "package.json" or f.suffix in (".js", ".mjs")):
                z.write(f, "node_modules/@onkernel/sdk/" + str(rel))
    return buf.getvalue()


def multipart(fields: dict, files: dict):
    boundary = "hangarfuzz" + secrets.token_hex(8)
    out = b""
    for name, value in fields.items():
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").encode()
    for name, (filename, content) in files.items():
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n"
                "Content-Type: application/zip\r\n\r\n").encode() + content + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), "multipart/form-data; boundary=" + boundary


def seed(url: str, key: str, connect_url: str, target: str) -> dict:
    """Real resources for the id routes: one of each kind to read and change, and a second one of
    the kinds whose DELETE would otherwise remove the first before the other operations ran."""
    ids = {"none": "fuzz-none"}  # an id nothing has
    # Headful, small: the computer routes and replays need a screen (a headless session has none).
    # The vault seeded below is attached to it, so vault item operations (fill) can reach it; the
    # create-or-get there finds this one.
    call(url, key, "POST", "/vaults", {"name": "fuzz-vault"})
    browser = call(url, key, "POST", "/browsers", {"headless": False, "timeout_seconds": 3600, "name": "api-fuzz-fixture",
                                                   "viewport": {"width": 800, "height": 600},
                                                   "vaults": [{"name": "fuzz-vault"}]})
    ids["browser"] = browser["session_id"]
    ids["jwt"] = urllib.parse.parse_qs(urllib.parse.urlparse(browser["cdp_ws_url"]).query)["jwt"][0]
    # webdriver_ws_url carries a token of its own kind (typ webdriver).
    ids["webdriver_jwt"] = urllib.parse.parse_qs(urllib.parse.urlparse(browser["webdriver_ws_url"]).query)["jwt"][0]
    live = urllib.parse.urlparse(browser.get("browser_live_view_url") or "").path
    if live.startswith("/browser/live/"):
        ids["live_token"] = live.rsplit("/", 1)[-1]
    ids["browser_victim"] = call(url, key, "POST", "/browsers", {"headless": True, "timeout_seconds": 3600})["session_id"]
    # A process on a PTY (resize needs one), one for kill, and one that has exited, whose output
    # stream sends what it wrote and its exit event and ends.
    spawn = f"/browsers/{ids['browser']}/process/spawn"
    ids["process"] = call(url, key, "POST", spawn, {"command": "sleep", "args": ["3600"], "allocate_tty": True})["process_id"]
    ids["process_victim"] = call(url, key, "POST", spawn, {"command": "sleep", "args": ["3600"]})["process_id"]
    ids["process_done"] = call(url, key, "POST", spawn, {"command": "echo", "args": ["fuzz"]})["process_id"]
    for role in ("", "_victim"):
        ids["watch" + role] = call(url, key, "POST", f"/browsers/{ids['browser']}/fs/watch", {"path": "/tmp"})["watch_id"]
    # The files openapi.yaml's examples of fs/move and fs/set_file_permissions name.
    for name in ("example-src.txt", "example-mode.txt"):
        call(url, key, "PUT", f"/browsers/{ids['browser']}/fs/write_file?path=/tmp/{name}", raw=b"example",
             content_type="application/octet-stream")
    # An MCP session for DELETE /mcp to end (the stateful phase's link from initialize rarely runs).
    req = urllib.request.Request(url + "/mcp", method="POST", headers={
        "Authorization": "Bearer " + key, "Content-Type": "application/json"}, data=json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "api-fuzz", "version": "1"}}}).encode())
    with urllib.request.urlopen(req, timeout=30) as res:
        ids["mcp_session"] = res.headers["Mcp-Session-Id"]
    # A custom WebMCP tool for DELETE .../custom-tools/{tool}.
    ids["tool"] = call(url, key, "POST", f"/browsers/{ids['browser']}/webmcp/custom-tools", {
        "namespace": "fuzz", "source": "[{kind: 'page', match: {url_patterns: ['https://example.test/*']}, "
        "tool: {name: 'fuzz_tool', description: 'fuzz', inputSchema: {type: 'object'}}, "
        "execute: async () => ({content: [{type: 'text', text: 'fuzz'}]})}]"})["tools"][0]["id"]
    # A tool webmcp/invoke can run: a cdp custom tool on the seeded browser's tab, which opens the
    # fuzz target site for it (the tool's tool_ref goes to hooks.py).
    execute = f"/browsers/{ids['browser']}/playwright/execute"
    call(url, key, "POST", execute, {"code": f"await page.goto({json.dumps(target + '/')}); return 1;"})
    call(url, key, "POST", f"/browsers/{ids['browser']}/webmcp/custom-tools", {
        "namespace": "fuzzcdp", "source": "[{kind: 'cdp', match: {url_patterns: ['http://127.0.0.1:*/*']}, "
        "tool: {name: 'fuzz_cdp', description: 'fuzz', inputSchema: {type: 'object'}}, "
        "execute: async () => ({content: [{type: 'text', text: 'fuzz'}]})}]"})
    tools = call(url, key, "GET", f"/browsers/{ids['browser']}/webmcp/tools").get("tools", [])
    ids["tool_ref"] = next(t["tool_ref"] for t in tools if t.get("tool", {}).get("name", "").endswith("fuzz_cdp"))
    for kind, path, body in [
        ("profile", "/profiles", lambda n: {"name": n}),
        ("proxy", "/proxies", lambda n: {"name": n, "type": "custom", "config": {"host": "127.0.0.1", "port": 9}}),
        ("credential", "/credentials",
         lambda n: {"name": n, "domain": "example.test", "values": {"username": "u", "password": "p"},
                    "totp_secret": "JBSWY3DPEHPK3PXP"}),
        ("project", "/org/projects", lambda n: {"name": n}),
        ("api_key", "/org/api_keys", lambda n: {"name": n}),
    ]:
        for role in ("", "_victim"):
            ids[kind + role] = call(url, key, "POST", path, body(f"fuzz-{kind}{role}"))["id"]
    # A saved profile (a session on it, deleted: that saves it), so its download has an archive.
    # Before the pools: the project runs four browsers at most.
    saver = call(url, key, "POST", "/browsers", {"headless": True, "profile": {"id": ids["profile"], "save_changes": True}})
    call(url, key, "DELETE", f"/browsers/{saver['session_id']}")
    deadline = time.time() + 60
    while True:
        try:
            call(url, key, "GET", f"/profiles/{ids['profile']}/download", raw_answer=True)
            break
        except urllib.error.HTTPError as e:
            if e.code != 409 or time.time() > deadline:
                raise SystemExit(f"the seeded profile was not saved: {e.code} {e.read()[:200]!r}")
            time.sleep(0.2)
    # A third connection no login is ever started on: its events stream sends the last state and ends.
    for role in ("", "_victim", "_idle"):
        ids["connection" + role] = call(url, key, "POST", "/auth/connections", {
            "domain": "example.test", "profile_name": f"fuzz-auth{role}"})["id"]
    for role in ("", "_victim"):
        ids["pool" + role] = call(url, key, "POST", "/browser_pools", {"name": f"fuzz-pool{role}", "size": 1})["id"]
        body, ctype = multipart({"name": f"fuzz-ext{role}"}, {"file": ("ext.zip", tiny_extension_zip())})
        ids["extension" + role] = call(url, key, "POST", "/extensions", raw=body, content_type=ctype)["id"]
        ids["provider" + role] = call(url, key, "POST", "/org/credential_providers", {
            "name": f"fuzz-provider{role}", "provider_type": "onepassword", "token": CONNECT_TOKEN,
            "url": connect_url})["id"]
        # The builds run after the answer; they are awaited below, together.
        body, ctype = multipart({"entrypoint_rel_path": "index.mjs"},
                                {"file": ("app.zip", tiny_app_zip(f"fuzz-app{role}"))})
        ids["deployment" + role] = call(url, key, "POST", "/deployments", raw=body, content_type=ctype)["id"]

    # Vaults (plugin vaults): a vault with a ready credential item, and provider configs.
    for role in ("", "_victim"):
        ids["vault" + role] = call(url, key, "POST", "/vaults", {"name": f"fuzz-vault{role}"})["id"]
        ids["vault_item" + role] = "fuzz-item"
        # The spec of openapi.yaml's example for this PUT: the example gets it back (200), not a 409.
        call(url, key, "PUT", f"/vaults/{ids['vault' + role]}/items/fuzz-item", {"type": "credential", "spec": {
            "provider": "kernel", "fields": [
                {"name": "username", "type": "text", "sensitive": False, "value": "user@example.com"},
                {"name": "password", "type": "password", "value": "example-password"}]}})
        ids["vault_config" + role] = call(url, key, "POST", "/vault-provider-configs", {
            "provider": "link", "name": f"fuzz-config{role}",
            "credentials": {"client_id": "c", "client_secret": "s"}})["id"]
        # An item pending collection: its hosted form's token (one for the form, one to submit).
        item = call(url, key, "PUT", f"/vaults/{ids['vault' + role]}/items/fuzz-collect", {"type": "credential", "spec": {
            "provider": "kernel", "fields": [{"name": "password", "type": "password", "required": True}]}})
        ids["collect_token" + role] = item["action"]["url"].rsplit("/", 1)[-1]
        # Destinations: the Connect double's address is the one the egress policy admits (an
        # export or a probe there fails, and says so in a 200).
        ids["otlp_destination" + role] = call(url, key, "POST", "/telemetry/destinations", {
            "name": f"fuzz-otlp{role}", "endpoint": connect_url})["id"]
        ids["audit_destination" + role] = call(url, key, "POST", "/audit-logs/export/destinations", {
            "type": "s3", "format": "jsonl.gz", "bucket": "fuzz-bucket", "prefix": f"fuzz{role}", "region": "us-east-1",
            "role_arn": "", "endpoint": connect_url, "access_key_id": "AKIAFUZZ", "secret_access_key": "fuzz"})["id"]

    # A replay, recorded for a moment.
    replay = call(url, key, "POST", f"/browsers/{ids['browser']}/replays", {"framerate": 5})
    ids["replay"] = replay["replay_id"]
    ids["replay_token"] = urllib.parse.urlparse(replay["replay_view_url"]).path.rsplit("/", 1)[-1]
    time.sleep(1)
    call(url, key, "POST", f"/browsers/{ids['browser']}/replays/{ids['replay']}/stop")

    for role in ("", "_victim"):
        deadline = time.time() + 120
        while (d := call(url, key, "GET", f"/deployments/{ids['deployment' + role]}"))["status"] in ("queued", "in_progress"):
            if time.time() > deadline:
                raise SystemExit(f"the seeded deployment did not build in 120 s: {d}")
            time.sleep(0.2)
        if d["status"] != "running":
            raise SystemExit(f"the seeded deployment failed: {d}")
    ids["invocation"] = call(url, key, "POST", "/invocations", {
        "app_name": "fuzz-app", "action_name": "echo", "payload": "{}"})["id"]
    return ids


# Which seeded id each path parameter gets: (path regex, parameters, the id's kind). DELETE of a
# resource gets the victim of its kind.
# Streams that would stay open for the whole request timeout with a real id behind them (a
# process that runs for an hour, a watch, a flow that waits): their own ids stay unpinned.
STREAMS = [
    # hooks.py ends a watch's stream (a second reader replaces the first).
    (r"^/browsers/\{id\}/fs/watch/\{watch_id\}/events$", {"path.id": "browser", "path.watch_id": "watch"}),
    (r"^/browsers/\{id\}/process/\{process_id\}/stdout/stream$", {"path.id": "browser", "path.process_id": "process_done"}),
    (r"^/auth/connections/\{id\}/events$", {"path.id": "connection_idle"}),
]
# Operations that end the resource they act on, besides each DELETE of a pinned path: they get
# the victim of its kind.
ENDERS = [
    ("POST /browsers/{id}/process/{process_id}/kill", {"path.id": "browser", "path.process_id": "process_victim"}),
    ("DELETE /browsers/{id}/fs/watch/{watch_id}", {"path.id": "browser", "path.watch_id": "watch_victim"}),
    ("POST /vaults/collect/{token}", {"path.token": "collect_token_victim"}),
    ("DELETE /browsers/{id}/webmcp/custom-tools/{tool}", {"path.id": "browser", "path.tool": "tool"}),
    ("DELETE /mcp", {"header.Mcp-Session-Id": "mcp_session"}),
]
PINS = [
    (r"^/browsers/\{id\}/replays", {"path.id": "browser", "path.replay_id": "replay"}),
    (r"^/replays/view/\{token\}", {"path.token": "replay_token"}),
    (r"^/browsers/\{id\}/", {"path.id": "browser", "path.process_id": "process", "path.watch_id": "watch"}),
    (r"^/browsers/\{id_or_name\}", {"path.id_or_name": "browser"}),
    (r"^/browser/vm/\{session_id\}/", {"path.session_id": "browser", "query.jwt": "jwt"}),
    (r"^/browser/live/\{token\}", {"path.token": "live_token"}),
    (r"^/browser/cdp/\{token\}/", {"path.token": "jwt"}),
    (r"^/browser/cdp", {"query.jwt": "jwt"}),
    (r"^/browser/webdriver", {"query.jwt": "webdriver_jwt"}),
    (r"^/browser_pools/\{id_or_name\}", {"path.id_or_name": "pool"}),
    (r"^/profiles/\{id_or_name\}", {"path.id_or_name": "profile"}),
    (r"^/proxies/\{id\}", {"path.id": "proxy"}),
    (r"^/credentials/\{id_or_name\}", {"path.id_or_name": "credential"}),
    (r"^/extensions/\{id_or_name\}", {"path.id_or_name": "extension"}),
    (r"^/auth/connections/\{id\}", {"path.id": "connection"}),
    (r"^/org/projects/\{id\}", {"path.id": "project"}),
    (r"^/org/api_keys/\{id\}", {"path.id": "api_key"}),
    (r"^/org/credential_providers/\{id\}", {"path.id": "provider"}),
    (r"^/deployments/\{id\}", {"path.id": "deployment"}),
    (r"^/invocations/\{id\}", {"path.id": "invocation"}),
    (r"^/vaults/\{id_or_name\}/items/\{key\}", {"path.id_or_name": "vault", "path.key": "vault_item"}),
    (r"^/vaults/\{id_or_name\}", {"path.id_or_name": "vault"}),
    (r"^/vault-provider-configs/\{id_or_name\}", {"path.id_or_name": "vault_config"}),
    (r"^/vaults/collect/\{token\}", {"path.token": "collect_token"}),
    (r"^/telemetry/destinations/\{id_or_name\}", {"path.id_or_name": "otlp_destination"}),
    (r"^/audit-logs/export/destinations/\{id\}", {"path.id": "audit_destination"}),
    (r"^/search/\{id\}", {"path.id": "search"}),
    (r"^/config-registry/analyses/\{id\}", {"path.id": "analysis"}),
]


def config_toml(ids: dict, deletable: set) -> str:
    def pinned(params: dict, victim: bool) -> list:
        lines = []
        for name, kind in params.items():
            value = ids.get(kind + "_victim") if victim else ids.get(kind)
            if value is not None:
                lines.append(f'"{name}" = "{value}"')
        return lines

    def entry(selector: str, params: list) -> list:
        # schemathesis refuses an entry that overrides nothing.
        return ["[[operations]]", selector, "[operations.parameters]", *params, ""] if params else []

    # A string: a TOML boolean goes out as "False", which the server refuses (true or false).
    out = ['[parameters]', '"query.follow" = "false"', ""]
    for regex, params in STREAMS:
        out += entry(f"include-path-regex = '{regex}'", pinned(params, False))
    for name, params in ENDERS:
        out += entry(f'include-name = "{name}"', pinned(params, False))
    for regex, params in PINS:
        # The first matching entry wins: DELETE of the resource itself before everything else,
        # selected by its name (a path and a method in one entry select either).
        path = regex[1:].replace("\\", "")
        if path in deletable:
            out += entry(f'include-name = "DELETE {path}"', pinned(params, True))
        out += entry(f"include-path-regex = '{regex}'", pinned(params, False))
    return "\n".join(out)


def interrupted(*_):
    raise KeyboardInterrupt


def main() -> int:
    # SIGTERM (make interrupted, a CI timeout) must still stop the server and its browser.
    signal.signal(signal.SIGTERM, interrupted)
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=30, help="max examples per operation and phase")
    ap.add_argument("--max-time", type=int, default=0, help="time budget in seconds (0: none)")
    ap.add_argument("--phases", default="examples,coverage,fuzzing,stateful")
    ap.add_argument("--seed", type=int, default=None)
    # One worker: with two, hypothesis' lambda-source cache raced once in a long run (a tool
    # error, not an API finding), and the server side is what the two cores are for.
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--min-requests", type=int, default=0, help="fail when fewer requests were sent")
    ap.add_argument("--seed-only", action="store_true", help="seed, print the ids and stop (to try the seeding)")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "hangar"))
    ap.add_argument("--out", default=str(ROOT / "build" / "api-fuzz"))
    args = ap.parse_args()

    out_dir = Path(args.out).resolve()
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    connect_url = start_connect_double()
    target_port = start_target()
    searx = contextlib.ExitStack()
    searx_url = None
    if os.path.exists(searx_server.python()):
        searx_url = searx.enter_context(searx_server.running(serve(searx_server.Corpus)))
    else:
        print(f"api fuzz: {searx_server.python()} is missing (`make searx`): /search answers 400 without a backend",
              flush=True)
    proc, url, key, data_dir = start_server(Path(args.bin), out_dir, connect_url, target_port, searx_url)
    seeding = time.time()
    ids = seed(url, key, connect_url, f"http://127.0.0.1:{target_port}")
    if searx_url:
        ids["search"] = call(url, key, "POST", "/search", {"query": "fuzz n5"})["id"]
    # An analysis of the fuzz site, cancelled at once (its browsers would take the project's slots):
    # GET and cancel of /config-registry/analyses/{id} then have a real one.
    analysis = call(url, key, "POST", "/config-registry/resolve", {"url": f"http://127.0.0.1:{target_port}/"})
    ids["analysis"] = analysis["analysis"]["id"]
    call(url, key, "POST", f"/config-registry/analyses/{ids['analysis']}/cancel")
    print(f"api fuzz: seeded in {time.time() - seeding:.1f} s: " + ", ".join(sorted(ids)), flush=True)
    paths = call(url, key, "GET", "/openapi.json").get("paths", {})
    deletable = {path for path, ops in paths.items() if "delete" in ops}
    (out_dir / "schemathesis.toml").write_text(config_toml(ids, deletable))
    if args.seed_only:
        print(json.dumps(ids, indent=1))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)
        searx.close()
        return 0
    ndjson = out_dir / "events.ndjson"
    cmd = [str(VENV_BIN / "schemathesis"), "run", url + "/openapi.json", "--url", url,
           "-H", "Authorization: Bearer " + key,
           "--checks", CHECKS, "--mode", "all", "--phases", args.phases,
           "--max-examples", str(args.examples), "--workers", str(args.workers),
           "--request-timeout", "70", "--suppress-health-check", "all",
           "--continue-on-failure", "--no-shrink",
           "--report", "ndjson,junit", "--report-ndjson-path", str(ndjson),
           "--report-junit-path", str(out_dir / "junit.xml")]
    if args.max_time:
        cmd += ["--max-time", str(args.max_time)]
    if args.seed is not None:
        cmd += ["--seed", str(args.seed)]
    print("$", " ".join(c if not c.startswith("Authorization") else "Authorization: Bearer ***" for c in cmd),
          flush=True)
    started = time.time()
    try:
        rc = subprocess.call(cmd, cwd=out_dir, env=dict(os.environ, SCHEMATHESIS_HOOKS="hooks",
                                                          PYTHONPATH=str(HERE), HANGAR_FUZZ_URL=url,
                                                          HANGAR_FUZZ_KEY=key,
                                                          HANGAR_FUZZ_TARGET=f"http://127.0.0.1:{target_port}",
                                                          HANGAR_FUZZ_BROWSER=ids["browser"],
                                                          HANGAR_FUZZ_TOOL_REF=ids["tool_ref"]))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
        searx.close()

    requests, statuses, by_operation = count_requests(ndjson)
    print("api fuzz: " + write_coverage(out_dir, by_operation))
    server_errors = sum(n for s, n in statuses.items() if s >= 500 and s not in (501, 502, 504))
    print(f"api fuzz: {requests} requests in {time.time() - started:.0f} s; "
          f"status counts {dict(sorted(statuses.items()))}; 5xx other than 501/502/504 (judged by hooks.py): {server_errors}; "
          f"schemathesis exit {rc}")
    if requests < args.min_requests:
        print(f"api fuzz: fewer than the {args.min_requests} requests asked for", file=sys.stderr)
        return 1
    return 0 if rc == 0 and server_errors == 0 else 1


def count_requests(ndjson: Path):
    """Every HTTP exchange recorded in the NDJSON report: the total, by status code, and by
    operation (its label, "GET /browsers/{id}/fs/list") the statuses it got."""
    statuses, by_operation = {}, {}
    total = 0
    if not ndjson.exists():
        return 0, statuses, by_operation

    def walk(node, label):
        nonlocal total
        if isinstance(node, dict):
            if isinstance(node.get("label"), str) and " /" in node["label"]:
                label = node["label"]
            resp = node.get("response")
            if isinstance(resp, dict) and isinstance(resp.get("status_code"), int) and "request" in node:
                total += 1
                code = resp["status_code"]
                statuses[code] = statuses.get(code, 0) + 1
                if label:
                    by_operation.setdefault(label, {})
                    by_operation[label][code] = by_operation[label].get(code, 0) + 1
                return
            for v in node.values():
                walk(v, label)
        elif isinstance(node, list):
            for v in node:
                walk(v, label)

    with open(ndjson) as f:
        for line in f:
            try:
                walk(json.loads(line), None)
            except json.JSONDecodeError:
                pass
    return total, statuses, by_operation


def write_coverage(out_dir: Path, by_operation: dict) -> str:
    """coverage.txt: each operation and the statuses it got, those without a 2xx first."""
    reached = sorted(op for op, codes in by_operation.items() if any(200 <= c < 300 for c in codes))
    missed = sorted(op for op in by_operation if op not in reached)
    lines = [f"# operations with a 2xx: {len(reached)} of {len(by_operation)}", "", "## without a 2xx"]
    lines += [f"{op}  {dict(sorted(by_operation[op].items()))}" for op in missed]
    lines += ["", "## with a 2xx"] + [f"{op}  {dict(sorted(by_operation[op].items()))}" for op in reached]
    (out_dir / "coverage.txt").write_text("\n".join(lines) + "\n")
    return f"{len(reached)} of {len(by_operation)} operations answered 2xx (build/api-fuzz/coverage.txt lists the rest)"


if __name__ == "__main__":
    sys.exit(main())
