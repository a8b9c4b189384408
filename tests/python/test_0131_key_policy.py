"""Statement-scoped API keys (kernel-api-0131.md §2.8) through the official Python SDK 0.131: a key
made with a `policy` reaches only the actions and objects its statements name, on every route;
lists show only what it may see; a policy that names something outside the key's reach is refused
with 400 and no key is made; a rotated key keeps its policy."""

from __future__ import annotations

import urllib.error
import urllib.request

import kernel
import pytest
from kernel import Kernel


def default_project(client: Kernel) -> str:
    return next(p.id for p in client.projects.list() if p.name == "default")


def key_names(client: Kernel) -> set[str]:
    return {k.name for k in client.api_keys.list()}


def test_a_scoped_key_reaches_only_what_its_statements_name(server, client: Kernel) -> None:
    project = default_project(client)
    mine = client.browsers.create(headless=True)
    other = client.browsers.create(headless=True)
    made = None
    created = None
    try:
        policy = {"statements": [
            {"action": "browsers:create", "resource": f"projects/{project}/*"},
            {"action": "browsers:use", "resource": f"projects/{project}/browsers/{mine.session_id}"},
            {"action": "proxies:read", "resource": f"projects/{project}/proxies/*"},
        ]}
        made = client.api_keys.create(name="py-policy-scoped", policy=policy)
        assert made.policy is not None and [(s.action, s.resource) for s in made.policy.statements] == \
            [(s["action"], s["resource"]) for s in policy["statements"]]
        assert client.api_keys.retrieve(made.id).policy == made.policy
        assert client.api_keys.retrieve(server_key_id(client)).policy is None  # an ordinary key has none
        scoped = Kernel(api_key=made.key, base_url=server.base_url, max_retries=0, timeout=120)

        # Its own browser: listed, read and used.
        assert [b.session_id for b in scoped.browsers.list()] == [mine.session_id]
        assert scoped.browsers.retrieve(mine.session_id).session_id == mine.session_id
        run = scoped.browsers.process.exec(mine.session_id, command="echo", args=["scoped"])
        assert run.exit_code == 0
        # Not to change or end, which it was not given.
        for call in (lambda: scoped.browsers.delete_by_id(mine.session_id),
                     lambda: scoped.browsers.update(mine.session_id, name="py-policy-renamed")):
            with pytest.raises(kernel.PermissionDeniedError) as refused:
                call()
            assert refused.value.body["code"] == "insufficient_scope", refused.value.body
        # The other browser, by any route: 403, and it is untouched.
        for call in (lambda: scoped.browsers.retrieve(other.session_id),
                     lambda: scoped.browsers.process.exec(other.session_id, command="true"),
                     lambda: scoped.browsers.computer.capture_screenshot(other.session_id),
                     lambda: scoped.browsers.fs.list_files(other.session_id, path="/tmp"),
                     lambda: scoped.browsers.delete_by_id(other.session_id)):
            with pytest.raises(kernel.PermissionDeniedError):
                call()
        # Nor by a path that only looks like its own browser's (as a hostile caller would try).
        for path in (f"/browsers/{other.session_id}/", f"/browsers/{mine.session_id}%2F..%2F{other.session_id}",
                     f"/browser/vm/{other.session_id}/fs/list_files?path=/tmp"):
            assert raw_status(server.base_url, made.key, path) in (401, 403), path
        assert client.browsers.retrieve(other.session_id).session_id == other.session_id
        # Everything its statements do not name, even reads.
        for call in (lambda: scoped.api_keys.list(), lambda: scoped.profiles.list(),
                     lambda: scoped.browser_pools.list(), lambda: scoped.projects.list(),
                     lambda: scoped.credentials.list(), lambda: scoped.api_keys.create(name="py-escalate")):
            with pytest.raises(kernel.PermissionDeniedError):
                call()
        # proxies:read on every proxy of the project: the plugin answers (404 for none such, not 403).
        scoped.proxies.list()
        with pytest.raises(kernel.NotFoundError):
            scoped.proxies.retrieve("prx_none")
        assert scoped.auth.context.retrieve().principal.id == made.id  # who am I stays open

        # It may create a browser, but not attach what it was not given.
        with pytest.raises(kernel.PermissionDeniedError) as refused:
            scoped.browsers.create(headless=True, profile={"name": "py-policy-profile"})
        assert "profiles:use" in refused.value.body["message"], refused.value.body
        created = scoped.browsers.create(headless=True)
        # browsers:use names one browser by id: the new one is not it.
        with pytest.raises(kernel.PermissionDeniedError):
            scoped.browsers.retrieve(created.session_id)

        # A rotated key keeps the policy.
        rotated = client.api_keys.rotate(made.id)
        assert rotated.policy == made.policy
        again = Kernel(api_key=rotated.key, base_url=server.base_url, max_retries=0, timeout=120)
        assert [b.session_id for b in again.browsers.list()] == [mine.session_id]
        with pytest.raises(kernel.PermissionDeniedError):
            again.browsers.retrieve(other.session_id)
        client.api_keys.delete(rotated.id)
    finally:
        if made:
            client.api_keys.delete(made.id)
        for b in (mine, other, created):
            if b:
                client.browsers.delete_by_id(b.session_id)


def raw_status(base_url: str, key: str, path: str) -> int:
    req = urllib.request.Request(base_url + path, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def server_key_id(client: Kernel) -> str:
    return client.auth.context.retrieve().principal.id


def test_a_policy_outside_the_keys_reach_is_refused_and_makes_no_key(server, client: Kernel) -> None:
    project = default_project(client)
    org = client.auth.context.retrieve().organization.id
    other = client.projects.create(name="py-policy-other")
    try:
        before = key_names(client)
        for policy, field in (
                ({"statements": [{"action": "browsers:fly", "resource": f"projects/{project}/*"}]}, "action"),
                ({"statements": [{"action": "browsers:use", "resource": "projects/proj_nope/*"}]}, "resource"),
                ({"statements": [{"action": "browsers:use", "resource": "organizations/org_elsewhere/*"}]},
                 "resource"),
                ({"statements": [{"action": "vaults:use", "resource": f"projects/{project}/profiles/x"}]},
                 "resource"),
                ({"statements": [{"action": "browsers:create",
                                  "resource": f"projects/{project}/browsers/x"}]}, "resource"),
                ({"statements": []}, "statements")):
            with pytest.raises(kernel.BadRequestError) as refused:
                client.api_keys.create(name="py-policy-bad", policy=policy)
            assert field in str(refused.value.body), (policy, refused.value.body)
        # A project-scoped key's statements stay in its project.
        with pytest.raises(kernel.BadRequestError):
            client.api_keys.create(name="py-policy-bad", project_id=project, policy={"statements": [
                {"action": "browsers:use", "resource": f"projects/{other.id}/*"}]})
        with pytest.raises(kernel.BadRequestError):
            client.api_keys.create(name="py-policy-bad", project_id=project, policy={"statements": [
                {"action": "browsers:use", "resource": f"organizations/{org}/*"}]})
        assert key_names(client) == before

        # An org-wide grant reaches every project it acts in; the project header picks which.
        made = client.api_keys.create(name="py-policy-org", policy={"statements": [
            {"action": "browsers:use", "resource": f"organizations/{org}/*"}]})
        try:
            there = Kernel(api_key=made.key, base_url=server.base_url, project_id=other.id, max_retries=0)
            assert list(there.browsers.list()) == []
            with pytest.raises(kernel.PermissionDeniedError):
                there.browsers.create(headless=True)
        finally:
            client.api_keys.delete(made.id)
    finally:
        client.projects.delete(other.id)
