"""Schemathesis hooks for Hangar (loaded through SCHEMATHESIS_HOOKS=hooks by fuzz_api.py).

One check replaces schemathesis' `not_a_server_error`: any 5xx fails, except 501 with the wire
body `{"code": "not_implemented"}`, which is Hangar's documented answer for an option it does not
implement yet (gpu, proxy_id, a telemetry capture...); and 502 `upstream_unavailable` from
GET /extensions/from_chrome_store, which is its contract on a machine that cannot reach the Chrome
Web Store (these test machines reach only loopback and package registries). fuzz_api.py counts
both apart from the other 5xx.

`before_call` bounds a pool acquire's wait to 1 s and `after_call` releases what an acquire leased:
fuzz_api.py seeds a pool of one, and each later acquire would otherwise wait out its timeout.
"""
import requests
import schemathesis


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
    if (response.status_code == 502 and code == "upstream_unavailable"
            and case.operation.path == "/extensions/from_chrome_store"):
        return None
    raise AssertionError(f"server error {response.status_code}: {response.text[:300]}")


ACQUIRE = "/browser_pools/{id_or_name}/acquire"


@schemathesis.hook
def before_call(ctx, case, kwargs):
    # Without the field the wait is the pool's fill estimate (tens of seconds here).
    if case.operation.path == ACQUIRE and isinstance(case.body, dict):
        wait = case.body.get("acquire_timeout_seconds")
        if not isinstance(wait, (int, float)) or isinstance(wait, bool) or wait > 1:
            case.body["acquire_timeout_seconds"] = 1


@schemathesis.hook
def after_call(ctx, case, response):
    # A lease taken is given back, so the next acquire finds the pool's browser idle again.
    if case.operation.path != ACQUIRE or response.status_code != 200:
        return
    try:
        session_id = response.json()["session_id"]
    except Exception:
        return
    request = response.request
    requests.post(request.url.replace("/acquire", "/release"), json={"session_id": session_id},
                  headers={"Authorization": request.headers.get("Authorization", "")}, timeout=60)
