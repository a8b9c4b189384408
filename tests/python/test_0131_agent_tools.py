"""WebMCP, the browser REPL and Playwright executors (kernel-api-0131.md §1G, §1H, §1I, §2.9) through
the official Python SDK 0.131 against the real server and a real Chromium:

- page tools that local test pages register with `document.modelContext.registerTool(...)` (top
  documents and a same-origin iframe), listed and invoked, and gone with their document;
- custom tools added by namespace (page-backed and CDP-backed), matched by URL pattern, hidden by
  `exclude_custom`, removed one by one, refused when the batch is not a non-empty array, and
  replaced whole with `force_overwrite_namespace`;
- the REPL's persistent bindings, output channels, images, errors, reset and timeout;
- named executors: their own tab, concurrency between names and serialization within one, the
  process and tab a delete ends, the limit of eight and the name grammar.

The pages are served over http on a host port the instance may reach (`http://127.0.0.1:<port>`,
a secure context for WebMCP). One browser for the module (conftest's `browser`), driven mostly
through its default tab (the default executor's `page`)."""

from __future__ import annotations

import base64
import http.server
import os
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Iterator
from urllib.parse import urlsplit

import pytest

import kernel
from kernel import Kernel

from conftest import ALLOWED_PORTS, PAGE_TITLE, reply, serving, wait_for

# ---- the pages ----------------------------------------------------------------------------------

# Two page tools: `add` with a structured input and `page_title` without one. The page records
# whether the WebMCP API was there, so a Chromium without it fails with a clear message.
TOOLS_SCRIPT = """
<script>
  const mc = document.modelContext || navigator.modelContext;
  document.documentElement.dataset.webmcp = mc ? 'yes' : 'no';
  mc.registerTool({
    name: 'add',
    description: 'Adds two numbers',
    inputSchema: {type: 'object', properties: {a: {type: 'number'}, b: {type: 'number'}}, required: ['a', 'b']},
    execute: async ({a, b}) => ({content: [{type: 'text', text: String(a + b)}]}),
  });
  mc.registerTool({
    name: 'page_title',
    description: 'The title of this page',
    execute: async () => ({content: [{type: 'text', text: document.title}]}),
  });
</script>
"""

FRAME_SCRIPT = """
<script>
  const mc = document.modelContext || navigator.modelContext;
  document.documentElement.dataset.webmcp = mc ? 'yes' : 'no';
  mc.registerTool({
    name: 'frame_tool',
    description: 'Answers from the frame',
    inputSchema: {type: 'object', properties: {}},
    execute: async () => ({content: [{type: 'text', text: 'frame says ' + document.title}]}),
  });
</script>
"""

FORMS = """
<form toolname="find_flights" tooldescription="Finds flights" action="/webmcp/sent">
  <input name="origin" toolparamdescription="Where from" required>
  <input name="destination" toolparamdescription="Where to">
  <button>Search</button>
</form>
<form toolname="subscribe" tooldescription="Subscribes" toolautosubmit action="/webmcp/sent">
  <input name="email" toolparamdescription="Address">
</form>
"""

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}

PAGES = {
    "/webmcp/tools": ("WebMCP tools", TOOLS_SCRIPT),
    "/webmcp/plain": ("No tools", "<p>nothing to see</p>"),
    "/webmcp/frame-top": ("Frame top", '<iframe src="/webmcp/frame-child"></iframe>'),
    "/webmcp/frame-child": ("Frame child", FRAME_SCRIPT),
    # Declarative tools: forms WebMCP turns into tools, one the agent submits, one that submits itself.
    "/webmcp/forms": ("Forms", FORMS),
    "/webmcp/sent": ("Sent", "<p>sent</p>"),
    # Matched by the custom tools' URL pattern; registers the two page tools too.
    "/custom/one": ("Custom one", TOOLS_SCRIPT),
}


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        found = PAGES.get(urlsplit(self.path).path)
        if urlsplit(self.path).path == "/webmcp/cross-top":
            # The same tools, and a frame of another site (an out-of-process iframe), allowed to
            # register tools or not (WebMCP's permissions-policy feature "tools").
            allow = ' allow="tools"' if "allow" in urlsplit(self.path).query else ""
            port = self.server.server_address[1]
            found = ("Cross top", TOOLS_SCRIPT + f'<iframe{allow} src="http://localhost:{port}/webmcp/frame-child"></iframe>')
        if found is None:
            self.send_error(404)
            return
        title, body = found
        html = f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()
        reply(self, 200, html)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    with serving(_Pages, range(ALLOWED_PORTS[0] + 90, ALLOWED_PORTS[0] + 120)) as port:
        yield f"http://127.0.0.1:{port}"


# ---- helpers ------------------------------------------------------------------------------------


def goto(client: Kernel, sid: str, url: str, *, executor: str | None = None) -> dict:
    """The tab of `executor` (the default one: the browser's first tab) navigated to `url`."""
    code = (
        f"await page.goto({json.dumps(url)});"
        " return { url: page.url(), title: await page.title(),"
        " webmcp: await page.evaluate(() => document.documentElement.dataset.webmcp || null) };"
    )
    kw = {"executor": executor} if executor else {}
    r = client.browsers.playwright.execute(sid, code=code, **kw)
    assert r.success is True, r
    assert r.result["webmcp"] in (None, "yes"), f"the page found no document.modelContext (WebMCP off?): {r.result}"
    return r.result


def tools(client: Kernel, sid: str, **kw) -> list:
    return list(client.browsers.webmcp.list_tools(sid, **kw).tools)


def names_at(client: Kernel, sid: str, page_url: str, **kw) -> set[str]:
    return {t.tool.name for t in tools(client, sid, **kw) if t.source.page_url == page_url}


def wait_names(client: Kernel, sid: str, page_url: str, want: set[str], **kw) -> list:
    """Waits until the tools of the tab at `page_url` are exactly `want`; those tools."""
    def ready():
        got = [t for t in tools(client, sid, **kw) if t.source.page_url == page_url]
        return got if {t.tool.name for t in got} == want and len(got) == len(want) else None
    return wait_for(ready, timeout=20, what=f"the tools {sorted(want)} at {page_url}")


def by_name(listed: list, name: str):
    found = [t for t in listed if t.tool.name == name]
    assert len(found) == 1, (name, listed)
    return found[0]


def texts(output: object) -> list[str]:
    """The text items of an MCP-style tool result (output is the object the tool returned)."""
    assert isinstance(output, dict), output
    return [c["text"] for c in output["content"] if c.get("type") == "text"]


def page_targets(client: Kernel, sid: str) -> list[str]:
    """The CDP target ids of every page target in the browser, read from the default executor."""
    r = client.browsers.playwright.execute(sid, code=(
        "const s = await browser.newBrowserCDPSession();"
        " const { targetInfos } = await s.send('Target.getTargets');"
        " await s.detach();"
        " return targetInfos.filter((t) => t.type === 'page').map((t) => t.targetId);"
    ))
    assert r.success is True, r
    return r.result


def close_target(client: Kernel, sid: str, target_id: str) -> None:
    r = client.browsers.playwright.execute(sid, code=(
        "const s = await browser.newBrowserCDPSession();"
        f" await s.send('Target.closeTarget', {{ targetId: {json.dumps(target_id)} }});"
        " await s.detach();"
    ))
    assert r.success is True, r


def executor_processes(client: Kernel, sid: str) -> set[str]:
    """The names of the named executors whose Node process runs in the instance
    (`node …/executor.mjs <endpoint> --executor <name>`)."""
    r = client.browsers.process.exec(sid, command="ps", args=["-ww", "-eo", "args"])
    assert r.exit_code == 0, r
    names = set()
    for line in base64.b64decode(r.stdout_b64 or "").decode().splitlines():
        words = line.split()
        if any(w.endswith("executor.mjs") for w in words) and "--executor" in words[:-1]:
            names.add(words[words.index("--executor") + 1])
    return names


def named_executors(client: Kernel, sid: str) -> dict:
    listed = client.browsers.playwright.executors.list(sid).executors
    assert listed and listed[0].name == "default", listed
    return {e.name: e for e in listed[1:]}


def drop_named_executors(client: Kernel, sid: str) -> None:
    for name in named_executors(client, sid):
        client.browsers.playwright.executors.delete(name, id_or_name=sid)


def drop_custom_tools(client: Kernel, sid: str) -> None:
    for d in client.browsers.webmcp.custom_tools.list(sid).tools:
        client.browsers.webmcp.custom_tools.remove(d.id, id_or_name=sid)


def sleep_code(ms: int) -> str:
    return f"await new Promise((r) => setTimeout(r, {ms})); return {ms};"


# ---- WebMCP page tools --------------------------------------------------------------------------


def test_page_tools_are_listed_invoked_and_gone_with_their_document(client: Kernel, browser, origin: str) -> None:
    sid = browser.session_id
    page_url = f"{origin}/webmcp/tools?v=1"
    seen = goto(client, sid, page_url + "#section")
    assert seen["webmcp"] == "yes", seen
    assert seen["title"] == "WebMCP tools"

    listed = wait_names(client, sid, page_url, {"add", "page_title"})  # the fragment left out
    add, title = by_name(listed, "add"), by_name(listed, "page_title")
    assert add.tool.description == "Adds two numbers"
    assert add.tool.input_schema == ADD_SCHEMA
    assert title.tool.description == "The title of this page"
    assert isinstance(title.tool.input_schema, dict)
    for t in (add, title):
        s = t.source
        assert s.page_url == page_url and s.page_title == "WebMCP tools", s
        assert type(s.tab_id) is int and type(s.window_id) is int, s
        assert s.frame is None and s.custom is None and s.target_id is None, s
        assert isinstance(t.tool_ref, str) and t.tool_ref, t
    # One tab: both tools name the same tab and window, with references of their own.
    assert (add.source.tab_id, add.source.window_id) == (title.source.tab_id, title.source.window_id)
    assert add.tool_ref != title.tool_ref

    done = client.browsers.webmcp.invoke_tool(sid, tool_ref=add.tool_ref, input={"a": 2, "b": 3})
    assert done.status == "completed", done
    assert isinstance(done.invocation_id, str) and done.invocation_id
    assert texts(done.output) == ["5"], done.output
    other = client.browsers.webmcp.invoke_tool(sid, tool_ref=add.tool_ref, input={"a": 40, "b": 2})
    assert other.status == "completed" and texts(other.output) == ["42"], other
    assert other.invocation_id != done.invocation_id
    named = client.browsers.webmcp.invoke_tool(sid, tool_ref=title.tool_ref, input={})
    assert named.status == "completed" and texts(named.output) == ["WebMCP tools"], named

    # Another document in the same tab: its registrations and their references are gone.
    plain = f"{origin}/webmcp/plain"
    goto(client, sid, plain)
    wait_for(lambda: not {add.tool_ref, title.tool_ref} & {t.tool_ref for t in tools(client, sid)},
             timeout=20, what="the old document's tools to leave the list")
    assert names_at(client, sid, plain) == set()
    assert names_at(client, sid, page_url) == set()
    with pytest.raises(kernel.NotFoundError):
        client.browsers.webmcp.invoke_tool(sid, tool_ref=add.tool_ref, input={"a": 2, "b": 3})

    # The same page loaded again registers again, under new references.
    goto(client, sid, page_url)
    again = by_name(wait_names(client, sid, page_url, {"add", "page_title"}), "add")
    assert again.tool_ref not in (add.tool_ref, title.tool_ref)
    assert again.source.tab_id == add.source.tab_id
    r = client.browsers.webmcp.invoke_tool(sid, tool_ref=again.tool_ref, input={"a": 1, "b": 1})
    assert r.status == "completed" and texts(r.output) == ["2"], r
    goto(client, sid, plain)


def test_a_tool_an_iframe_registers_names_its_frame(client: Kernel, browser, origin: str) -> None:
    sid = browser.session_id
    top, child = f"{origin}/webmcp/frame-top", f"{origin}/webmcp/frame-child"
    assert goto(client, sid, top)["title"] == "Frame top"

    t = by_name(wait_names(client, sid, top, {"frame_tool"}), "frame_tool")
    s = t.source
    assert s.page_url == top and s.page_title == "Frame top", s
    assert s.frame is not None, s
    assert s.frame.url == child and type(s.frame.frame_id) is int, s.frame
    assert s.custom is None, s
    r = client.browsers.webmcp.invoke_tool(sid, tool_ref=t.tool_ref, input={})
    assert r.status == "completed" and texts(r.output) == ["frame says Frame child"], r
    goto(client, sid, f"{origin}/webmcp/plain")


def test_a_frame_of_another_site_has_tools_only_when_its_page_allows_it(client: Kernel, browser, origin: str) -> None:
    """A cross-site iframe runs in its own process (its own CDP target, which the service
    attaches to). Without `allow="tools"` Chromium's permissions policy refuses its tools, and
    nothing is listed for it; with it, its tool is listed with its frame and invoked there."""
    sid = browser.session_id
    frame_url = f"http://localhost:{urlsplit(origin).port}/webmcp/frame-child"
    frame_registered = (
        "const f = page.frames().find((x) => x.url().includes('localhost'));"
        " await f.waitForFunction(() => document.title === 'Frame child');"
        " return await f.evaluate(async () => { try { return (await document.modelContext.getTools()).map((t) => t.name); }"
        " catch (e) { return e.name; } });")

    refused = f"{origin}/webmcp/cross-top"
    goto(client, sid, refused)
    wait_names(client, sid, refused, {"add", "page_title"})
    seen = client.browsers.playwright.execute(sid, code=frame_registered)
    assert seen.success is True and seen.result == "NotAllowedError", seen
    time.sleep(0.5)
    assert names_at(client, sid, refused) == {"add", "page_title"}

    allowed = f"{origin}/webmcp/cross-top?allow"
    goto(client, sid, allowed)
    t = by_name(wait_names(client, sid, allowed, {"add", "page_title", "frame_tool"}), "frame_tool")
    assert t.source.page_url == allowed and t.source.frame is not None and t.source.frame.url == frame_url, t.source
    r = client.browsers.webmcp.invoke_tool(sid, tool_ref=t.tool_ref, input={})
    assert r.status == "completed" and texts(r.output) == ["frame says Frame child"], r
    goto(client, sid, f"{origin}/webmcp/plain")


# ---- WebMCP custom tools ------------------------------------------------------------------------


def custom_source(pattern: str) -> str:
    p = json.dumps(pattern)
    return f"""[
  {{
    kind: 'page',
    match: {{url_patterns: [{p}]}},
    tool: {{name: 'echo', description: 'echo', inputSchema: {{type: 'object', properties: {{x: {{type: 'string'}}}}}}}},
    execute: async (input) => ({{content: [{{type: 'text', text: 'echo ' + input.x + ' ' + document.title}}]}}),
  }},
  {{
    kind: 'cdp',
    match: {{url_patterns: [{p}]}},
    tool: {{name: 'tab_url', description: 'The URL of the tab', inputSchema: {{type: 'object'}}}},
    execute: async (input, {{page}}) => ({{url: page.url()}}),
  }},
]"""


def one_page_tool(pattern: str, name: str) -> str:
    return (f"[{{kind: 'page', match: {{url_patterns: [{json.dumps(pattern)}]}},"
            f" tool: {{name: {json.dumps(name)}, description: {json.dumps(name)}, inputSchema: {{type: 'object'}}}},"
            f" execute: async () => ({{content: [{{type: 'text', text: {json.dumps(name)}}}]}})}}]")


def test_custom_tools_match_by_url_and_are_added_removed_and_replaced(client: Kernel, browser, origin: str) -> None:
    sid = browser.session_id
    ct = client.browsers.webmcp.custom_tools
    pattern = f"{origin}/custom/*"
    url = f"{origin}/custom/one"
    plain = f"{origin}/webmcp/plain"
    drop_custom_tools(client, sid)
    try:
        added = ct.add(sid, namespace="ns1", source=custom_source(pattern)).tools
        assert [(d.tool.name, d.kind, d.namespace) for d in added] == [("echo", "page", "ns1"), ("tab_url", "cdp", "ns1")]
        for d in added:
            assert d.match.url_patterns == [pattern], d
            assert isinstance(d.id, str) and d.id, d
        assert added[0].id != added[1].id
        assert added[0].tool.description == "echo"
        assert added[0].tool.input_schema == {"type": "object", "properties": {"x": {"type": "string"}}}
        assert added[1].tool.input_schema == {"type": "object"}
        echo_id, tab_url_id = added[0].id, added[1].id
        listed = ct.list(sid).tools
        assert {(d.id, d.tool.name, d.namespace) for d in listed} == {(echo_id, "echo", "ns1"), (tab_url_id, "tab_url", "ns1")}

        # A page loaded after the add has them, beside its own page tools.
        goto(client, sid, url)
        found = wait_names(client, sid, url, {"add", "page_title", "echo", "tab_url"})
        echo, tab_url = by_name(found, "echo"), by_name(found, "tab_url")
        assert (echo.source.custom.id, echo.source.custom.namespace) == (echo_id, "ns1"), echo.source
        assert (tab_url.source.custom.id, tab_url.source.custom.namespace) == (tab_url_id, "ns1"), tab_url.source
        default_tab = client.browsers.playwright.execute(sid, code="return 1").tab
        assert default_tab is not None
        assert tab_url.source.target_id == default_tab.target_id, (tab_url.source, default_tab)
        for t in (echo, tab_url):
            assert t.source.page_url == url and t.source.page_title == "Custom one" and t.source.frame is None, t.source
        assert by_name(found, "add").source.custom is None

        r = client.browsers.webmcp.invoke_tool(sid, tool_ref=echo.tool_ref, input={"x": "hi"})
        assert r.status == "completed" and texts(r.output) == ["echo hi Custom one"], r
        r = client.browsers.webmcp.invoke_tool(sid, tool_ref=tab_url.tool_ref, input={})
        assert r.status == "completed" and r.output == {"url": url}, r

        # exclude_custom leaves the page's own tools only.
        assert names_at(client, sid, url, exclude_custom=True) == {"add", "page_title"}
        assert names_at(client, sid, url, exclude_custom=False) == {"add", "page_title", "echo", "tab_url"}

        # A page the pattern does not match gets none of them.
        goto(client, sid, plain)
        wait_for(lambda: not any(t.source.custom for t in tools(client, sid)), timeout=20,
                 what="the custom tools to leave with the matching page")
        assert names_at(client, sid, plain) == set()

        # A second namespace beside the first.
        ns2 = ct.add(sid, namespace="ns2", source=one_page_tool(pattern, "ns2_tool")).tools
        assert [(d.tool.name, d.namespace, d.kind) for d in ns2 if d.namespace == "ns2"] == [("ns2_tool", "ns2", "page")]
        ns2_id = next(d.id for d in ns2 if d.namespace == "ns2")

        # Removing one by id.
        assert ct.remove(echo_id, id_or_name=sid) is None
        assert {d.id for d in ct.list(sid).tools} == {tab_url_id, ns2_id}
        with pytest.raises(kernel.NotFoundError):
            ct.remove(echo_id, id_or_name=sid)
        goto(client, sid, url)
        found = wait_names(client, sid, url, {"add", "page_title", "tab_url", "ns2_tool"})
        assert by_name(found, "ns2_tool").source.custom.namespace == "ns2"

        # Batches that are not a non-empty array are refused, and nothing changes.
        for bad in ("({name: 'not an array'})", "[]"):
            with pytest.raises(kernel.BadRequestError):
                ct.add(sid, namespace="ns1", source=bad)
        assert {d.id for d in ct.list(sid).tools} == {tab_url_id, ns2_id}

        # force_overwrite_namespace replaces the whole namespace (and only it).
        over = ct.add(sid, namespace="ns1", source=one_page_tool(pattern, "echo2"), force_overwrite_namespace=True).tools
        assert [(d.tool.name, d.namespace) for d in over if d.namespace == "ns1"] == [("echo2", "ns1")]
        after = {(d.tool.name, d.namespace) for d in ct.list(sid).tools}
        assert after == {("echo2", "ns1"), ("ns2_tool", "ns2")}, after
        goto(client, sid, url)
        found = wait_names(client, sid, url, {"add", "page_title", "echo2", "ns2_tool"})
        r = client.browsers.webmcp.invoke_tool(sid, tool_ref=by_name(found, "echo2").tool_ref, input={})
        assert r.status == "completed" and texts(r.output) == ["echo2"], r
    finally:
        drop_custom_tools(client, sid)
    assert ct.list(sid).tools == []
    goto(client, sid, plain)


# ---- REPL ---------------------------------------------------------------------------------------


def items(r) -> list[tuple[str, str]]:
    """A REPL answer's content as (channel, text) and ('image', mime_type) pairs, in order."""
    out = []
    for c in r.content or []:
        out.append((c.channel, c.text) if c.type == "text" else ("image", c.mime_type))
    return out


def test_repl_keeps_state_and_reports_channels_images_and_errors(client: Kernel, browser, origin: str) -> None:
    sid = browser.session_id
    first = client.browsers.repl(sid, code="let n = 1; repl.write('a')")
    assert first.success is True, first
    assert isinstance(first.repl_id, str) and first.repl_id
    assert items(first) == [("write", "a")], first

    second = client.browsers.repl(sid, code="n += 1; console.log(n)")
    assert second.success is True, second
    assert [(ch, text.strip()) for ch, text in items(second)] == [("stdout", "2")], second
    third = client.browsers.repl(sid, code="n += 1; repl.write(String(n))")
    assert third.success is True and items(third) == [("write", "3")], third
    assert first.repl_id == second.repl_id == third.repl_id

    # Output keeps its order across channels.
    mixed = client.browsers.repl(sid, code="repl.write('x'); console.log('y'); console.error('z'); repl.write('w')")
    assert mixed.success is True, mixed
    assert [(ch, text.strip()) for ch, text in items(mixed)] == [("write", "x"), ("stdout", "y"), ("stderr", "z"), ("write", "w")]

    # Top-level await, the browser's page.
    url = f"{origin}/webmcp/plain"
    r = client.browsers.repl(sid, code=f"await page.goto({json.dumps(url)}); const t = await page.title(); repl.write(t)")
    assert r.success is True and items(r) == [("write", "No tools")], r
    r = client.browsers.repl(sid, code="repl.write(t + ' ' + n)")  # both bindings are still there
    assert r.success is True and items(r) == [("write", "No tools 3")], r

    shot = client.browsers.repl(sid, code="repl.emitImage(await page.screenshot())")
    assert shot.success is True, shot
    images = [c for c in shot.content or [] if c.type == "image"]
    assert len(images) == 1, shot.content
    assert images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data_b64)[:8] == b"\x89PNG\r\n\x1a\n"

    # A thrown error fails the call, not the REPL.
    err = client.browsers.repl(sid, code="throw new Error('boom-4711')")
    assert err.success is False, err
    assert "boom-4711" in (err.error or ""), err
    assert err.repl_id == first.repl_id and not err.repl_terminated, err
    r = client.browsers.repl(sid, code="repl.write(String(n))")
    assert r.success is True and items(r) == [("write", "3")], r

    # code "" only with reset.
    with pytest.raises(kernel.BadRequestError):
        client.browsers.repl(sid, code="")
    fresh = client.browsers.repl(sid, code="", reset=True)
    assert fresh.success is True, fresh
    assert fresh.repl_id != first.repl_id
    r = client.browsers.repl(sid, code="repl.write(typeof n)")
    assert r.success is True and items(r) == [("write", "undefined")], r
    assert r.repl_id == fresh.repl_id


def test_repl_timeout_terminates_it_and_the_next_call_starts_a_new_one(client: Kernel, browser) -> None:
    sid = browser.session_id
    before = client.browsers.repl(sid, code="let kept = 'yes'; repl.write(kept)")
    assert before.success is True and items(before) == [("write", "yes")], before

    started = time.monotonic()
    stuck = client.browsers.repl(sid, code="while (true) {}", timeout_sec=1)
    took = time.monotonic() - started
    assert stuck.success is False, stuck
    assert stuck.repl_terminated is True, stuck
    assert stuck.repl_id == before.repl_id, stuck  # the REPL it terminated
    assert took < 20, took

    after = client.browsers.repl(sid, code="repl.write(typeof kept)")
    assert after.success is True, after
    assert after.repl_id != before.repl_id
    assert items(after) == [("write", "undefined")], after


# ---- Playwright executors -----------------------------------------------------------------------


def test_a_named_executor_owns_a_tab_and_is_listed(client: Kernel, browser, page_url: str) -> None:
    sid = browser.session_id
    pw = client.browsers.playwright
    drop_named_executors(client, sid)
    try:
        first = pw.execute(sid, code=f"await page.goto({json.dumps(page_url)}); return page.url();", executor="a")
        assert first.success is True and first.result == page_url, first
        assert first.tab is not None and first.tab.created is True, first
        assert isinstance(first.tab.target_id, str) and first.tab.target_id
        second = pw.execute(sid, code="return [page.url(), await page.title()];", executor="a")
        assert second.success is True and second.result == [page_url, PAGE_TITLE], second
        assert second.tab.created is False and second.tab.target_id == first.tab.target_id, second

        # Its tab is not the default executor's.
        default = pw.execute(sid, code="return 1;")
        assert default.success is True and default.tab is not None, default
        assert default.tab.target_id != first.tab.target_id
        assert {first.tab.target_id, default.tab.target_id} <= set(page_targets(client, sid))

        listed = pw.executors.list(sid).executors
        assert [e.name for e in listed] == ["default", "a"], listed
        d, a = listed
        assert d.target_id is None and d.busy is False, d
        assert a.target_id == first.tab.target_id and a.busy is False and a.url == page_url, a
        now = datetime.now(timezone.utc)
        assert a.created_at.tzinfo is not None and abs(now - a.created_at) < timedelta(minutes=2), a
        assert a.created_at <= a.last_used_at <= now + timedelta(seconds=5), a
    finally:
        drop_named_executors(client, sid)


@pytest.mark.slow  # waits out a 2 s and a 4 s pair of calls
def test_executors_run_concurrently_across_names_and_serially_within_one(client: Kernel, browser) -> None:
    sid = browser.session_id
    pw = client.browsers.playwright
    drop_named_executors(client, sid)

    def run(name: str, ms: int = 2000):
        return pw.execute(sid, code=sleep_code(ms), executor=name)

    try:
        for name in ("a", "b"):  # started first, so the timing below has no Node start-up in it
            warm = pw.execute(sid, code="return 1;", executor=name)
            assert warm.success is True, warm

        with ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            results = list(pool.map(run, ["a", "b"]))
            both = time.monotonic() - started
        assert [(r.success, r.result) for r in results] == [(True, 2000), (True, 2000)], results
        assert both < 3.5, f"two executors' 2 s calls took {both:.2f} s together"

        # Two calls on one executor run one after the other; meanwhile only it shows busy.
        with ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            running = [pool.submit(run, "a"), pool.submit(run, "a")]
            busy = wait_for(lambda: (lambda ex: ex if ex["a"].busy else None)(named_executors(client, sid)),
                            timeout=1.5, interval=0.1, what="executor a to be busy")
            assert busy["b"].busy is False, busy
            results = [f.result() for f in running]
            serial = time.monotonic() - started
        assert [(r.success, r.result) for r in results] == [(True, 2000), (True, 2000)], results
        assert serial >= 3.9, f"two calls on one executor overlapped: {serial:.2f} s"
        assert named_executors(client, sid)["a"].busy is False
    finally:
        drop_named_executors(client, sid)


def test_deleting_an_executor_ends_its_process_and_closes_its_tab(client: Kernel, browser) -> None:
    sid = browser.session_id
    pw = client.browsers.playwright
    drop_named_executors(client, sid)
    try:
        tab_a = pw.execute(sid, code="return 1;", executor="a").tab.target_id
        tab_b = pw.execute(sid, code="return 1;", executor="b").tab.target_id
        assert {"a", "b"} <= executor_processes(client, sid)
        assert {tab_a, tab_b} <= set(page_targets(client, sid))

        assert pw.executors.delete("a", id_or_name=sid) is None
        assert set(named_executors(client, sid)) == {"b"}
        wait_for(lambda: "a" not in executor_processes(client, sid), timeout=15, what="executor a's process to end")
        wait_for(lambda: tab_a not in page_targets(client, sid), timeout=15, what="executor a's tab to close")
        assert "b" in executor_processes(client, sid)
        assert tab_b in page_targets(client, sid)
        with pytest.raises(kernel.NotFoundError):
            pw.executors.delete("a", id_or_name=sid)

        # close_tab=false: the process ends, the tab stays.
        pw.executors.delete("b", id_or_name=sid, close_tab=False)
        assert named_executors(client, sid) == {}
        wait_for(lambda: "b" not in executor_processes(client, sid), timeout=15, what="executor b's process to end")
        assert tab_b in page_targets(client, sid)
        close_target(client, sid, tab_b)

        # The name can be used again: a new executor with a new tab.
        again = pw.execute(sid, code="return 1;", executor="a")
        assert again.success is True and again.tab.created is True and again.tab.target_id != tab_a, again
        assert "a" in executor_processes(client, sid)

        # A call running on an executor that is deleted fails, saying so.
        with ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            running = pool.submit(pw.execute, sid, code=sleep_code(20000), executor="c", timeout_sec=60)
            wait_for(lambda: (lambda ex: "c" in ex and ex["c"].busy)(named_executors(client, sid)),
                     timeout=15, interval=0.1, what="executor c to be busy")
            pw.executors.delete("c", id_or_name=sid)
            cut = running.result()
            took = time.monotonic() - started
        assert cut.success is False and "deleted" in (cut.error or ""), cut
        assert took < 15, took

        # The default executor is restarted, not removed.
        assert pw.executors.delete("default", id_or_name=sid) is None
        r = pw.execute(sid, code="return 6 * 7;")
        assert r.success is True and r.result == 42, r
        assert pw.executors.list(sid).executors[0].name == "default"
    finally:
        drop_named_executors(client, sid)


@pytest.mark.slow  # starts nine Node processes, about a second of CPU each
def test_eight_named_executors_at_most_and_the_name_grammar(client: Kernel, browser) -> None:
    sid = browser.session_id
    pw = client.browsers.playwright
    drop_named_executors(client, sid)
    try:
        for bad in ("", "x" * 65, "has space", "a/b", "ünï", "semi;colon", "tab\t"):
            with pytest.raises(kernel.BadRequestError):
                pw.execute(sid, code="return 1;", executor=bad)
        assert named_executors(client, sid) == {}

        names = ["x" * 64, "A-z_0.9", "b", "e1", "e2", "e3", "e4", "e5"]
        with ThreadPoolExecutor(4) as pool:  # each starts a Node process: about a second alone
            started = list(pool.map(lambda name: pw.execute(sid, code="return 1;", executor=name), names))
        for name, r in zip(names, started):
            assert r.success is True and r.tab is not None and r.tab.created is True, (name, r)
        assert set(named_executors(client, sid)) == set(names)
        assert set(names) <= executor_processes(client, sid)

        with pytest.raises(kernel.ConflictError) as full:
            pw.execute(sid, code="return 1;", executor="ninth")
        assert full.value.status_code == 409
        said = json.dumps(full.value.body)
        assert all(n in said for n in names), said  # it lists the executors there are
        assert "ninth" not in named_executors(client, sid)
        assert "ninth" not in executor_processes(client, sid)
        # The default executor is not one of the eight.
        assert pw.execute(sid, code="return 1;").success is True

        pw.executors.delete("e5", id_or_name=sid)
        r = pw.execute(sid, code="return 1;", executor="ninth")
        assert r.success is True and r.tab.created is True, r
    finally:
        drop_named_executors(client, sid)
    assert named_executors(client, sid) == {}


def test_the_runtimes_run_inside_the_instance_as_its_user(client: Kernel, browser, server) -> None:
    """The REPL, the WebMCP service and the executors are processes of the browser's sandbox,
    with the uid the process API has there, and a hostile id in a path reaches no other route."""
    sid = browser.session_id
    uid = client.browsers.process.exec(sid, command="id", args=["-u"])
    assert uid.exit_code == 0, uid
    sandbox_uid = base64.b64decode(uid.stdout_b64 or "").decode().strip()
    r = client.browsers.repl(sid, code="repl.write(String(process.getuid()), String(process.ppid > 0))")
    assert r.success is True, r
    assert r.content[0].text == f"{sandbox_uid} true", r.content
    client.browsers.webmcp.list_tools(sid)  # starts the WebMCP service
    assert client.browsers.playwright.execute(sid, code="return 1").success is True
    ps = client.browsers.process.exec(sid, command="ps", args=["-ww", "-eo", "user:32,args"])
    lines = base64.b64decode(ps.stdout_b64 or "").decode().splitlines()
    for script in ("repl.mjs", "webmcp.mjs", "executor.mjs"):
        found = [line for line in lines if script in line]
        assert found, (script, lines)  # seen from inside: same pid namespace as the process API
    # The server's own files are not there to read (its data dir is hidden in the sandbox).
    assert os.path.isdir(server.data_dir)
    r = client.browsers.repl(sid, code=f"repl.write(String(require('fs').existsSync({json.dumps(server.data_dir)})))")
    assert r.success is True and r.content[0].text == "false", r
    # Path segments that are not ids are nothing, whatever they spell.
    # (The SDK itself refuses a bare "..".)
    for bad in ("../../playwright/executors/default", "a b", "x%2F..%2F..%2Frepl"):
        with pytest.raises(kernel.NotFoundError):
            client.browsers.webmcp.custom_tools.remove(bad, id_or_name=sid)
        with pytest.raises(kernel.NotFoundError):
            client.browsers.playwright.executors.delete(bad, id_or_name=sid)


def test_repl_output_is_capped_and_says_so(client: Kernel, browser) -> None:
    sid = browser.session_id
    r = client.browsers.repl(sid, code="for (let i = 0; i < 3; i++) repl.write('x'.repeat(512 * 1024)); console.log('after')")
    assert r.success is True, r.error
    assert r.content_truncated is True
    assert sum(len(c.text) for c in r.content if c.type == "text") == 1 << 20
    small = client.browsers.repl(sid, code="repl.write('ok')")
    assert small.content_truncated is not True and small.content[0].text == "ok"



def test_declarative_form_tools_fill_and_wait_or_submit(client: Kernel, browser, origin: str) -> None:
    sid = browser.session_id
    url = f"{origin}/webmcp/forms"
    goto(client, sid, url)
    found = wait_names(client, sid, url, {"find_flights", "subscribe"})
    flights, subscribe = by_name(found, "find_flights"), by_name(found, "subscribe")
    assert flights.tool.input_schema["properties"]["origin"]["description"] == "Where from", flights.tool
    assert flights.tool.input_schema.get("required") == ["origin"], flights.tool
    assert subscribe.tool.annotations is not None and subscribe.tool.annotations.autosubmit is True

    # Without autosubmit the fields are filled and the form waits for whoever submits it.
    r = client.browsers.webmcp.invoke_tool(sid, tool_ref=flights.tool_ref, input={"origin": "SFO", "destination": "JFK"})
    assert r.status == "awaiting_submission", r
    filled = client.browsers.playwright.execute(sid, code=(
        "return [page.url(), await page.inputValue('[name=origin]'), await page.inputValue('[name=destination]')];"))
    assert filled.result == [url, "SFO", "JFK"], filled

    # With autosubmit the tool completes by submitting.
    r = client.browsers.webmcp.invoke_tool(sid, tool_ref=subscribe.tool_ref, input={"email": "a@example.com"})
    assert r.status == "completed", r
    wait_for(lambda: client.browsers.playwright.execute(sid, code="return page.url()").result
             == f"{origin}/webmcp/sent?email=a%40example.com", timeout=10, what="the form to be submitted")


@pytest.mark.slow  # waits out the 5 s a never-ending source is given
def test_a_hostile_custom_tool_does_not_take_the_service_down(client: Kernel, browser, origin: str) -> None:
    sid = browser.session_id
    ct = client.browsers.webmcp.custom_tools
    url = f"{origin}/webmcp/plain"
    drop_custom_tools(client, sid)
    try:
        # A source that never finishes evaluating is refused, not waited on forever.
        started = time.monotonic()
        with pytest.raises(kernel.BadRequestError):
            ct.add(sid, namespace="loop", source="(() => { for (;;) {} })()")
        assert time.monotonic() - started < 15
        source = f"""[{{
          kind: 'cdp', match: {{url_patterns: [{json.dumps(url)}]}},
          tool: {{name: 'late_throw', description: 'throws after answering'}},
          execute: async () => {{ setTimeout(() => {{ throw new Error('late'); }}, 10);
                                  Promise.reject(new Error('floating')); return {{ok: true}}; }},
        }}]"""
        ct.add(sid, namespace="hostile", source=source)
        goto(client, sid, url)
        ref = by_name(wait_names(client, sid, url, {"late_throw"}), "late_throw").tool_ref
        for _ in range(2):
            r = client.browsers.webmcp.invoke_tool(sid, tool_ref=ref, input={})
            assert r.status == "completed" and r.output == {"ok": True}, r
            time.sleep(0.1)
        # The same service still answers, with the same tools and refs.
        assert by_name(client.browsers.webmcp.list_tools(sid).tools, "late_throw").tool_ref == ref
    finally:
        drop_custom_tools(client, sid)


def test_custom_tools_outlive_a_chromium_restart(client: Kernel, browser, origin: str) -> None:
    """A viewport change restarts Chromium and with it the WebMCP service; the custom tools come
    back under the same ids."""
    sid = browser.session_id
    ct = client.browsers.webmcp.custom_tools
    url = f"{origin}/custom/one"
    drop_custom_tools(client, sid)
    try:
        added = ct.add(sid, namespace="kept", source=custom_source(f"{origin}/custom/*")).tools
        before = client.browsers.retrieve(sid).viewport
        client.browsers.update(sid, viewport={"width": 1280 if before.width != 1280 else 1366, "height": 800})
        assert {d.id for d in ct.list(sid).tools} == {d.id for d in added}
        goto(client, sid, url)
        found = wait_names(client, sid, url, {"add", "page_title", "echo", "tab_url"})
        r = client.browsers.webmcp.invoke_tool(sid, tool_ref=by_name(found, "echo").tool_ref, input={"x": "again"})
        assert r.status == "completed" and texts(r.output) == ["echo again Custom one"], r
    finally:
        drop_custom_tools(client, sid)
