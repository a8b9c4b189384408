"""Schemathesis hooks for Hangar (loaded through SCHEMATHESIS_HOOKS=hooks by fuzz_api.py).

One check replaces schemathesis' `not_a_server_error`: any 5xx fails, except 501 with the wire
body `{"code": "not_implemented"}`, which is Hangar's documented answer for an option it does not
implement yet (gpu, proxy_id, a telemetry capture...); and 502 `upstream_unavailable` from
GET /extensions/from_chrome_store, which is its contract on a machine that cannot reach the Chrome
Web Store (these test machines reach only loopback and package registries); 502 `bad_gateway` and
504 `gateway_timeout` from the curl routes, their answers when the browser cannot reach the target
(the one loopback port fetches may reach is the Connect double's, which the browser's own network
does not see) or it does not answer within `timeout_ms`; and 502 `upstream_unavailable` from a
credential provider's items when its Connect server refuses the token; and 502 `bad_gateway` from
POST /search when no provider answered in time. fuzz_api.py counts 501, 502 and 504 apart from the
other 5xx.

`before_call` drops a generated `X-Kernel-Project-Id`, bounds a pool acquire's wait to 1 s and a
recording's length to 2 s, gives a pool release a browser the pool leased, ends a watch's event
stream once answered (end_watch_stream), sends every other well-formed curl/raw target to
fuzz_api.py's own site, points a vault item operation at the seeded browser's current page,
gives every other upload_zip and extension upload a real zip, and every other WebMCP invoke the
seeded cdp tool; `after_call` releases what an
acquire leased (and what a refused release did not give back): fuzz_api.py seeds a pool of one, and each later
acquire would otherwise wait out its timeout.
"""
import os
import threading
import time

import requests
import schemathesis

# fuzz_api.py passes the server's address and key (schemathesis adds its -H header after the hooks).
BASE = os.environ.get("HANGAR_FUZZ_URL", "")
# A site the seeded browser reaches (fuzz_api.py's start_target): every other curl/raw case whose
# generated url is a valid one goes there, so the relay of a real answer is fuzzed too.
TARGET = os.environ.get("HANGAR_FUZZ_TARGET", "")
RAW = "/browser/vm/{session_id}/curl/raw"
STEERED = {}  # operation path -> how many of its cases could be steered so far


def every_other(path):
    """True for every other steerable case of the operation (the first, third, ...): the others
    keep what was generated, so both the real resource and the fuzzer's own values are sent."""
    STEERED[path] = STEERED.get(path, 0) + 1
    return STEERED[path] % 2 == 1
# The seeded browser, which the seeded vault is attached to (fuzz_api.py): an item operation that
# names a browser names this one (a random id only ever gets 404), on the page it is on.
BROWSER = os.environ.get("HANGAR_FUZZ_BROWSER", "")
ITEM_OPERATIONS = "/vaults/{id_or_name}/items/{key}/operations"
# Multipart parts that must be a zip, which generated data never is: every other case whose part
# is there carries a real one (an archive for upload_zip, into a folder the instance user may
# write; an MV3 extension under a valid name). Loading extensions into the running browser and
# deploying apps stay generated only: each real one restarts Chromium or runs a build.
ZIP_PARTS = {"/browsers/{id}/fs/upload_zip": "zip_file", "/extensions": "file"}
# The cdp custom tool fuzz_api.py seeded on the seeded browser's tab: every other invoke naming a
# tool names it (a generated tool_ref only ever gets 404).
TOOL_REF = os.environ.get("HANGAR_FUZZ_TOOL_REF", "")
INVOKE = "/browsers/{id}/webmcp/invoke"


def zip_of(files):
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()
AUTH = {"Authorization": "Bearer " + os.environ.get("HANGAR_FUZZ_KEY", "")}


@schemathesis.check
def no_server_error(ctx, response, case):
    if response.status_code < 500:
        return None
    try:
        code = response.json().get("code")
    except Exception:
        code = None
    if response.status_code == 501 and code == "not_implemented":
        return None
    # curl/raw answers with the target's own status, headers and body (kernel-api.md §5): a 5xx
    # without Hangar's error body is the target's (or its proxy's: the fuzzer attaches proxies to
    # the seeded browser, and one to an unknown host answers 502 provider_unreachable).
    if case.operation.path == RAW and code is None:
        return None
    if (response.status_code == 502 and code == "upstream_unavailable"
            and case.operation.path == "/extensions/from_chrome_store"):
        return None
    # The curl routes answer as a gateway: 502 when the browser cannot reach the target, 504 when
    # the target does not answer within the request's timeout_ms.
    if ((response.status_code, code) in ((502, "bad_gateway"), (504, "gateway_timeout"))
            and "/curl" in case.operation.path):
        return None
    # A provider's items when its Connect server refuses the token (the stateful phase changes it).
    if (response.status_code == 502 and code == "upstream_unavailable"
            and case.operation.path == "/org/credential_providers/{id}/items"):
        return None
    # A search no provider answered (a timeout_ms shorter than searx's answer): 502 by contract
    # (kernel-api-0131 §1C, "if every attempt fails → 502").
    if response.status_code == 502 and code == "bad_gateway" and case.operation.path == "/search":
        return None
    raise AssertionError(f"server error {response.status_code}: {response.text[:300]}")


ACQUIRE = "/browser_pools/{id_or_name}/acquire"
RELEASE = "/browser_pools/{id_or_name}/release"
REPLAYS = "/browsers/{id}/replays"
WATCH_EVENTS = "/browsers/{id}/fs/watch/{watch_id}/events"


def bound(body, field, most):
    """The field at most `most` when it is a number or missing; left alone when it is of another
    type (the server's 400 for it is what the case tests)."""
    value = body.get(field)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > most):
        body[field] = most


WATCH_READERS = {}  # id(case) -> the event that stops its stream ender


def end_watch_stream(url, done):
    """A watch's event stream stays open while the watch lives; a second reader replaces the first
    and the server closes the first one's stream. Until the case's own request is answered (75 s
    at most: the request timeout is 70), a reader opened and let go (0.2 s after the case's, then
    every half second) ends the one before it, so the case gets its 200 and the events held for it."""
    deadline = time.monotonic() + 75
    pause = 0.2
    while not done.wait(pause) and time.monotonic() < deadline:
        pause = 0.5
        try:
            requests.get(url, headers=AUTH, stream=True, timeout=5).close()
        except requests.RequestException:
            pass


RELEASES = {"done": False, "waits": 3}  # a release answered 204 yet; acquires that may still wait


def lease(case):
    """A browser leased from the case's pool (the seeded one), or None. After a release that did
    not reuse it, the pool's one browser is refilled only seconds later, and a wait for each
    release case would add them up: the acquire waits 1 s only until a release went through (three
    times at most), then not at all."""
    wait = 0
    if not RELEASES["done"] and RELEASES["waits"] > 0:
        RELEASES["waits"] -= 1
        wait = 1
    try:
        r = requests.post(BASE + case.formatted_path.replace("/release", "/acquire"),
                          json={"acquire_timeout_seconds": wait}, headers=AUTH, timeout=30)
        return r.json().get("session_id") if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


@schemathesis.hook
def before_call(ctx, case, kwargs):
    # The project header is the key's own project, where fuzz_api.py seeded every resource: a
    # random one only ever gets 404 (or 403), and the operation behind it is never reached.
    # tests/e2e/org.test.mjs checks foreign and unknown projects.
    if case.headers:
        for name in [n for n in case.headers if n.lower() == "x-kernel-project-id"]:
            del case.headers[name]
    if case.operation.path == RAW and TARGET and isinstance(case.query, dict):
        url = case.query.get("url")
        if isinstance(url, str) and url[:4].lower() == "http" and "://" in url and every_other(RAW):
            case.query["url"] = TARGET + "/" + url.split("://", 1)[1].partition("/")[2]
    if case.operation.path == WATCH_EVENTS and case.method.upper() == "GET":
        done = WATCH_READERS[id(case)] = threading.Event()
        threading.Thread(target=end_watch_stream, args=(BASE + case.formatted_path, done), daemon=True).start()
    # A release names a browser the pool leased (a random one only ever gets 404): the generated
    # session_id is replaced when it is a string, other types stay (their 400 is the case).
    if (case.operation.path == RELEASE and isinstance(case.body, dict)
            and isinstance(case.body.get("session_id"), str)):
        leased = lease(case)
        if leased:
            case.body["session_id"] = leased
    if not isinstance(case.body, dict) or case.method.upper() != "POST":
        return
    part = ZIP_PARTS.get(case.operation.path)
    if part and part in case.body and every_other(case.operation.path):
        if part == "zip_file":
            case.body[part] = zip_of({"fuzz/a.txt": "fuzz"})
            case.body["dest_path"] = "/home/kernel/fuzz-unzipped"
        else:
            case.body[part] = zip_of({"manifest.json": '{"manifest_version": 3, "name": "fuzz", "version": "1.0"}'})
            case.body["name"] = f"fuzz-ext-{STEERED[case.operation.path]}"
    if (case.operation.path == INVOKE and TOOL_REF and isinstance(case.body.get("tool_ref"), str)
            and every_other(INVOKE)):
        case.body["tool_ref"] = TOOL_REF
    if case.operation.path == ITEM_OPERATIONS and BROWSER and isinstance(case.body.get("browser_id"), str):
        case.body["browser_id"] = BROWSER
        if isinstance(case.body.get("page_url"), str):
            del case.body["page_url"]
    # Without the field the wait is the pool's fill estimate (tens of seconds here).
    if case.operation.path == ACQUIRE:
        bound(case.body, "acquire_timeout_seconds", 1)
    # A recording started runs ffmpeg until it is stopped or its maximum duration: 2 s at most
    # here, so the many the fuzzer starts do not pile up on the seeded browser.
    if case.operation.path == REPLAYS:
        bound(case.body, "max_duration_in_seconds", 2)


@schemathesis.hook
def after_call(ctx, case, response):
    if (done := WATCH_READERS.pop(id(case), None)) is not None:
        done.set()
    # A lease taken is given back, so the next acquire finds the pool's browser idle again (and
    # a release's that was refused).
    if case.operation.path == RELEASE and response.status_code == 204:
        RELEASES["done"] = True
    if case.operation.path == RELEASE and response.status_code != 204 and isinstance(case.body, dict):
        session_id = case.body.get("session_id")
        if isinstance(session_id, str):
            requests.post(BASE + case.formatted_path, json={"session_id": session_id}, headers=AUTH, timeout=60)
        return
    if case.operation.path != ACQUIRE or response.status_code != 200:
        return
    try:
        session_id = response.json()["session_id"]
    except Exception:
        return
    request = response.request
    requests.post(request.url.replace("/acquire", "/release"), json={"session_id": session_id},
                  headers={"Authorization": request.headers.get("Authorization", "")}, timeout=60)
