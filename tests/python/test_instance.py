"""One headless browser's sub-resources through the Python SDK (sync): fs (write/read, upload,
upload_zip, download_dir_zip, watch over SSE), process exec + spawn + stdout stream, computer
(screenshot, click, batch), Playwright execution, logs stream (SSE), extensions loaded into the
running browser (multipart)."""

from __future__ import annotations

import base64
import io
import json
import threading
import zipfile

import pytest

import kernel
from kernel import Kernel


def zip_of(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def mv3(mark: str) -> bytes:
    return zip_of({
        "manifest.json": json.dumps({
            "manifest_version": 3,
            "name": f"hangar py {mark}",
            "version": "1.0",
            "content_scripts": [{"matches": ["<all_urls>"], "js": ["c.js"], "run_at": "document_start"}],
        }),
        "c.js": f"document.documentElement.dataset.{mark} = 'yes';",
    })


def test_fs_write_read_upload_zip(client: Kernel, browser) -> None:
    sid = browser.session_id
    assert client.browsers.fs.write_file(sid, contents=b"hello \xe2\x9c\x93", path="/home/kernel/py/a.txt") is None
    assert client.browsers.fs.read_file(sid, path="/home/kernel/py/a.txt").read() == "hello ✓".encode()

    # Two files in one multipart upload (files[i][dest_path] / files[i][file]).
    client.browsers.fs.upload(sid, files=[
        {"dest_path": "/home/kernel/py/up1.txt", "file": ("up1.txt", b"one")},
        {"dest_path": "/home/kernel/py/sub/up2.bin", "file": io.BytesIO(b"\x00\x01two")},
    ])
    assert client.browsers.fs.read_file(sid, path="/home/kernel/py/up1.txt").read() == b"one"
    assert client.browsers.fs.read_file(sid, path="/home/kernel/py/sub/up2.bin").read() == b"\x00\x01two"

    client.browsers.fs.upload_zip(sid, dest_path="/home/kernel/py/unz",
                                  zip_file=("x.zip", zip_of({"c.txt": "C", "d/e.txt": "E"})))
    names = {f.name for f in client.browsers.fs.list_files(sid, path="/home/kernel/py/unz")}
    assert names == {"c.txt", "d"}
    info = client.browsers.fs.file_info(sid, path="/home/kernel/py/unz/c.txt")
    assert info.size_bytes == 1 and not info.is_dir

    data = client.browsers.fs.download_dir_zip(sid, path="/home/kernel/py/unz").read()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.read("c.txt") == b"C" and z.read("d/e.txt") == b"E"

    with pytest.raises(kernel.NotFoundError):
        client.browsers.fs.read_file(sid, path="/home/kernel/py/none.txt").read()
    with pytest.raises(kernel.BadRequestError):
        client.browsers.fs.read_file(sid, path="relative.txt").read()


def test_fs_watch_streams_events(client: Kernel, browser) -> None:
    sid = browser.session_id
    client.browsers.fs.create_directory(sid, path="/home/kernel/pywatch")
    watch = client.browsers.fs.watch.start(sid, path="/home/kernel/pywatch", recursive=True)
    stream = client.browsers.fs.watch.events(watch.watch_id, id_or_name=sid)
    seen: list[object] = []

    def read() -> None:
        for event in stream:
            seen.append(event)
            if any(getattr(e, "name", "") == "new.txt" or str(getattr(e, "path", "")).endswith("new.txt") for e in seen):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for _ in range(20):
        client.browsers.fs.write_file(sid, contents=b"x", path="/home/kernel/pywatch/new.txt")
        reader.join(0.5)
        if not reader.is_alive():
            break
    assert not reader.is_alive(), f"no event for new.txt: {seen}"
    assert any(e.type in ("CREATE", "WRITE") for e in seen)
    stream.close()
    client.browsers.fs.watch.stop(watch.watch_id, id_or_name=sid)


def test_process_exec_spawn_stream(client: Kernel, browser) -> None:
    sid = browser.session_id
    r = client.browsers.process.exec(sid, command="sh", args=["-c", "echo out; echo err >&2; exit 3"])
    assert r.exit_code == 3
    assert base64.b64decode(r.stdout_b64 or "") == b"out\n"
    assert base64.b64decode(r.stderr_b64 or "") == b"err\n"

    p = client.browsers.process.spawn(sid, command="sh", args=["-c", "for i in 1 2 3; do echo line$i; done"])
    out = b""
    exit_code = None
    # Closed by `with` when the loop leaves early: a stream left to the garbage collector closes
    # its response whenever a collection runs, which can be inside httpcore's pool lock during a
    # later request, and that request then waits for itself forever.
    with client.browsers.process.stdout_stream(p.process_id, id_or_name=sid) as stream:
        for ev in stream:
            if ev.event == "exit":
                exit_code = ev.exit_code
                break
            if ev.data_b64:
                out += base64.b64decode(ev.data_b64)
    assert out == b"line1\nline2\nline3\n"
    assert exit_code == 0
    status = client.browsers.process.status(p.process_id, id_or_name=sid)
    assert status.state == "exited"


def test_computer_screenshot_click_batch(client: Kernel, browser) -> None:
    sid = browser.session_id
    png = client.browsers.computer.capture_screenshot(sid).read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    region = client.browsers.computer.capture_screenshot(sid, region={"x": 0, "y": 0, "width": 100, "height": 50}).read()
    assert region[:8] == b"\x89PNG\r\n\x1a\n" and len(region) < len(png)
    assert client.browsers.computer.click_mouse(sid, x=10, y=10) is None
    assert client.browsers.computer.batch(sid, actions=[
        {"type": "move_mouse", "move_mouse": {"x": 50, "y": 60}},
        {"type": "click_mouse", "click_mouse": {"x": 50, "y": 60}},
        {"type": "sleep", "sleep": {"duration_ms": 10}},
        {"type": "type_text", "type_text": {"text": "hi"}},
    ]) is None
    pos = client.browsers.computer.get_mouse_position(sid)
    assert (pos.x, pos.y) == (50, 60)


def test_playwright_execute(client: Kernel, browser, page_url: str) -> None:
    r = client.browsers.playwright.execute(
        browser.session_id,
        code=f"await page.goto({json.dumps(page_url)}); console.log('seen'); return await page.title();",
    )
    assert r.success is True, r
    assert r.result == "Hangar Python page"
    assert "seen" in (r.stdout or "")


def test_logs_stream(client: Kernel, browser) -> None:
    sid = browser.session_id
    client.browsers.fs.write_file(sid, contents=b"first\nsecond\n", path="/home/kernel/py.log")
    lines = [e.message for e in client.browsers.logs.stream(sid, source="path", path="/home/kernel/py.log", follow=False)]
    assert lines == ["first", "second"]
    with pytest.raises(kernel.BadRequestError):
        for _ in client.browsers.logs.stream(sid, source="path"):
            pass


def test_load_extensions_into_running_browser(client: Kernel, browser) -> None:
    raw = client.browsers.with_raw_response.load_extensions(browser.session_id, extensions=[
        {"name": "py-one", "zip_file": ("one.zip", mv3("pyone"))},
        {"name": "py-two", "zip_file": ("two.zip", mv3("pytwo"))},
    ])
    assert raw.status_code in (201, 204)
    names = sorted(f.name for f in client.browsers.fs.list_files(browser.session_id, path="/home/kernel/extensions"))
    assert names == ["py-one", "py-two"]


def test_direct_to_browser_routes(client: Kernel, browser) -> None:
    """The SDK sends fs/process/computer/playwright/logs calls to the browser's base_url with the
    jwt of cdp_ws_url (no API key) once it knows the browser; Hangar serves them there."""
    import httpx
    from urllib.parse import parse_qs, urlparse

    jwt = parse_qs(urlparse(browser.cdp_ws_url).query)["jwt"][0]
    base = browser.base_url
    assert base and base.endswith(f"/browser/vm/{browser.session_id}")
    client.browsers.fs.write_file(browser.session_id, contents=b"direct", path="/home/kernel/direct.txt")
    r = httpx.get(f"{base}/fs/read_file", params={"path": "/home/kernel/direct.txt", "jwt": jwt})
    assert r.status_code == 200 and r.content == b"direct"
    r = httpx.post(f"{base}/process/exec", params={"jwt": jwt}, json={"command": "echo", "args": ["vm"]})
    assert r.status_code == 200 and base64.b64decode(r.json()["stdout_b64"]) == b"vm\n"
    # A wrong or missing token is a 401 before anything runs (the SDK then retries on the API).
    assert httpx.get(f"{base}/fs/read_file", params={"path": "/home/kernel/direct.txt", "jwt": "x"}).status_code == 401
    assert httpx.get(f"{base}/fs/read_file", params={"path": "/home/kernel/direct.txt"}).status_code == 401
    # A client that never retries works only if the direct route answers (max_retries=0 here).
    assert client.browsers.fs.read_file(browser.session_id, path="/home/kernel/direct.txt").read() == b"direct"
