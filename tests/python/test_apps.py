"""Apps through the Python SDK (sync): the Python fixture app (tests/fixtures/apps/py-app) zipped,
deployed with its env vars (the SDK's own multipart encoding of `env_vars`), followed to
`running`, and an action invoked and its events followed. The server builds a venv from the
app's requirements.txt, so this takes the time of a pip install (cached after the first)."""

from __future__ import annotations

import io
import json
import pathlib
import zipfile

from kernel import Kernel

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "apps" / "py-app"


def fixture_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in sorted(FIXTURE.iterdir()):
            if f.is_file():
                z.write(f, f.name)
    return buf.getvalue()


def test_deploy_follow_and_invoke_a_python_app(client: Kernel) -> None:
    created = client.deployments.create(
        file=("app.zip", fixture_zip()), entrypoint_rel_path="main.py", env_vars={"GREETING": "from-python"}
    )
    assert created.status == "queued"
    assert created.env_vars == {"GREETING": ""}, "values are redacted for API-key callers"
    states = []
    # Closed here, not by the garbage collector: a stream left half-read is closed whenever it is
    # collected, and httpx then takes its pool lock, which a request in flight on this thread may
    # hold (seen as a hang in CI).
    with client.deployments.follow(created.id) as events:
        for event in events:
            if event.event == "deployment_state":
                states.append(event.deployment.status)
                if event.deployment.status in ("running", "failed", "stopped"):
                    break
    final = client.deployments.retrieve(created.id)
    assert final.status == "running", final.status_reason
    assert states[-1] == "running"

    inv = client.invocations.create(app_name="fixture-py", action_name="env", version="latest")
    assert inv.status == "succeeded", inv.status_reason
    assert json.loads(inv.output) == {"greeting": "from-python", "has_key": True}
    seen = [e.event for e in client.invocations.follow(inv.id)]
    assert seen[-1] == "invocation_state" and "invocation_state" in seen
