"""Fixtures of the Python SDK conformance suite: the real `hangar serve`, started the way
tests/e2e/lib/server.mjs starts it (fresh temp data dir, 127.0.0.1:0, random key, readiness from
the server's own "hangar listening on" line), and the official `kernel` clients pointed at it.

At most two browsers are alive at once: `browser` (one headless session shared by the module
that asks for it) plus one a test makes and deletes itself.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

import kernel

REPO = Path(__file__).resolve().parents[2]
HANGAR_BIN = os.environ.get("HANGAR_BIN") or str(REPO / "build" / "bin" / "hangar")
# Host loopback ports an instance may reach (the same span as the e2e suite).
ALLOWED_PORTS = (21000, 21199)
LISTEN_RE = re.compile(r"hangar listening on (http://127\.0\.0\.1:(\d+))")
PAGE_TITLE = "Hangar Python page"


class Server:
    def __init__(self, base_url: str, api_key: str, data_dir: str, proc: subprocess.Popen[str], output: list[str]):
        self.base_url = base_url
        self.api_key = api_key
        self.data_dir = data_dir
        self.proc = proc
        self._output = output

    def output(self) -> str:
        return "".join(self._output)

    def admin(self, *args: str) -> str:
        env = dict(os.environ, HANGAR_DATA_DIR=self.data_dir, HANGAR_API_KEY=self.api_key)
        return subprocess.run([HANGAR_BIN, "admin", *args], env=env, capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()


# The servers running now: a failing test's report carries the end of their output (a hang or an
# error on the server's side shows there, not in the client's traceback).
_running: list[Server] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for srv in _running:
            tail = "".join(srv._output[-80:])
            report.sections.append((f"hangar at {srv.base_url}, last lines", tail))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` (HANGAR_E2E_TIER=fast) skips what `slow` marks, as the e2e tier does."""
    if os.environ.get("HANGAR_E2E_TIER") != "fast":
        return
    skip = pytest.mark.skip(reason="slow tier: make test-all runs it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

@contextlib.contextmanager
def launched(extra_env: dict[str, str] | None = None, keep_data: bool = False) -> Iterator[Server]:
    """A `hangar serve` of its own (fresh data dir), stopped with SIGTERM on the way out; `extra_env`
    adds to the environment (HANGAR_CONFIG for a config file, HANGAR_DATA_DIR and HANGAR_API_KEY to
    start again on the same store, ...); `keep_data` leaves the data dir for the next start."""
    if not os.path.exists(HANGAR_BIN):
        pytest.exit(f"{HANGAR_BIN} does not exist: build first (make build)", returncode=2)
    data_dir = tempfile.mkdtemp(prefix="hangar-py-")
    api_key = "sk_test_" + secrets.token_hex(24)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEL_")}
    env.update(
        HANGAR_LISTEN="127.0.0.1:0",
        HANGAR_DATA_DIR=data_dir,
        HANGAR_API_KEY=api_key,
        HANGAR_WARM_SPARES="0",
        HANGAR_KEEP_SESSIONS_ON_STOP="0",  # its SIGTERM ends every session
        HANGAR_SANDBOX_ALLOW_HOST_PORTS=f"{ALLOWED_PORTS[0]}-{ALLOWED_PORTS[1]}",
    )
    env.update(extra_env or {})
    data_dir, api_key = env["HANGAR_DATA_DIR"], env["HANGAR_API_KEY"]
    proc = subprocess.Popen([HANGAR_BIN, "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    output: list[str] = []
    ready = threading.Event()
    base: list[str] = []

    # HANGAR_TEST_LOG=<file> keeps the server's output there as it comes (a hang shows in it).
    log = open(os.environ["HANGAR_TEST_LOG"], "a", encoding="utf-8") if os.environ.get("HANGAR_TEST_LOG") else None

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if log:
                log.write(line)
                log.flush()
            m = LISTEN_RE.search(line)
            if m and not ready.is_set():
                base.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60) or not base:
        proc.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
        pytest.exit("hangar did not print its listening line:\n" + "".join(output), returncode=2)
    srv = Server(base[0], api_key, data_dir, proc, output)
    _running.append(srv)
    try:
        yield srv
    finally:
        _running.remove(srv)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not keep_data:
            # A server a test killed (SIGKILL) leaves its prepared networks' pastas to the next
            # start on its data dir (host/README.md, "Prepared networks"); none comes for this one.
            end_pastas_of(data_dir)
            shutil.rmtree(data_dir, ignore_errors=True)


def end_pastas_of(data_dir: str) -> None:
    """SIGKILLs every pasta whose pid file lies under `data_dir`."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("pasta ") and data_dir + "/" in cmd:
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


@contextlib.contextmanager
def postgres(port: int) -> Iterator[str]:
    """A throw-away PostgreSQL (tests/pg/pgtemp.sh) on 127.0.0.1:`port`; its store URL. Not under
    pytest's tmp_path: its parents are 0700, and PostgreSQL runs as its own user."""
    parent = tempfile.mkdtemp(prefix="hangar-py-pg-")
    os.chmod(parent, 0o755)
    pg_dir = os.path.join(parent, "pg")
    script = str(REPO / "tests" / "pg" / "pgtemp.sh")
    url = subprocess.run(["sh", script, "start", pg_dir, str(port)], capture_output=True, text=True, check=True,
                         timeout=120).stdout.strip()
    try:
        yield url
    finally:
        subprocess.run(["sh", script, "stop", pg_dir], capture_output=True, timeout=60)
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with launched() as srv:
        yield srv


@pytest.fixture(scope="session")
def client(server: Server) -> kernel.Kernel:
    return kernel.Kernel(api_key=server.api_key, base_url=server.base_url, timeout=120, max_retries=0)


@pytest.fixture(scope="session")
def async_client(server: Server) -> kernel.AsyncKernel:
    return kernel.AsyncKernel(api_key=server.api_key, base_url=server.base_url, timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def browser(client: kernel.Kernel) -> Iterator[object]:
    """One headless session for a whole module (a second browser may live beside it)."""
    session = client.browsers.create(headless=True, timeout_seconds=300)
    try:
        yield session
    finally:
        try:
            client.browsers.delete_by_id(session.session_id)
        except kernel.NotFoundError:
            pass


def reply(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes | str,
          content_type: str = "text/html; charset=utf-8") -> None:
    """One whole answer from a test's HTTP handler: status, type, length and body."""
    data = body.encode() if isinstance(body, str) else body
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = f"<!doctype html><html><head><title>{PAGE_TITLE}</title></head><body><h1>hi</h1></body></html>"
        reply(self, 200, body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler], ports: range) -> Iterator[int]:
    """`handler` served on the first free one of `ports` (host ports the instances may reach)."""
    for port in ports:
        try:
            srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError:
            continue
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            yield port
        finally:
            srv.shutdown()
        return
    raise RuntimeError(f"no free port in {ports} for {handler.__name__}")


@pytest.fixture(scope="session")
def page_url() -> Iterator[str]:
    """A page on a host port the instances may reach."""
    with serving(_Pages, range(ALLOWED_PORTS[0] + 150, ALLOWED_PORTS[1] + 1)) as port:
        yield f"http://127.0.0.1:{port}/"


def wait_for(fn, timeout: float = 30, interval: float = 0.25, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 (retried until the deadline)
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {last}" if last else ""))
        time.sleep(interval)


def config_dir(d: str, main: dict[str, str], plugins: dict[str, str]) -> str:
    """The repository's etc/ copied into `d`, with the `key = value` lines of hangar.ini named in
    `main` replaced and each plugins[name] appended to plugins.d/<name>.ini; the path of hangar.ini."""
    shutil.copytree(REPO / "etc", d, dirs_exist_ok=True)
    path = Path(d) / "hangar.ini"
    text = path.read_text()
    for key, value in main.items():
        text, n = re.subn(rf"^{re.escape(key)} =.*$", f"{key} = {value}", text, count=1, flags=re.M)
        assert n == 1, key
    path.write_text(text)
    for name, extra in plugins.items():
        f = Path(d) / "plugins.d" / f"{name}.ini"
        f.write_text(f.read_text() + "\n" + extra + "\n")
    return str(path)
