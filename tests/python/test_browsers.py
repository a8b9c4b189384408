"""Browsers through the official Python SDK (sync client): create with every option Hangar serves,
get by id and by name, list paging (the SDK's own auto-paging over X-Has-More / X-Next-Offset),
update, delete, include_deleted, and the SDK's error classes for 400/401/404/409/429/501."""

from __future__ import annotations

import datetime as dt

import pytest

import kernel
from kernel import Kernel


def test_create_with_every_option_then_get_by_name(client: Kernel, page_url: str) -> None:
    profile = client.profiles.create(name="py-every-option")
    s = client.browsers.create(
        name="py-every-option",
        headless=True,
        stealth=True,
        kiosk_mode=False,
        timeout_seconds=120,
        viewport={"width": 1280, "height": 800},
        start_url=page_url,
        tags={"team": "python", "suite": "conformance"},
        chrome_policy={"BookmarkBarEnabled": False},
        profile={"name": profile.name, "save_changes": False},
    )
    try:
        assert s.session_id
        assert s.headless is True and s.stealth is True
        assert s.timeout_seconds == 120
        assert s.viewport is not None and (s.viewport.width, s.viewport.height) == (1280, 800)
        assert s.cdp_ws_url.startswith("ws://")
        # Dates decode to timezone-aware datetimes, as Kernel's do.
        assert isinstance(s.created_at, dt.datetime) and s.created_at.tzinfo is not None
        assert s.profile is not None and s.profile.name == profile.name

        by_name = client.browsers.retrieve("py-every-option")
        assert by_name.session_id == s.session_id
        assert by_name.tags == {"team": "python", "suite": "conformance"}
        by_id = client.browsers.retrieve(s.session_id)
        assert by_id.name == "py-every-option"
    finally:
        client.browsers.delete_by_id(s.session_id)
    client.profiles.delete(profile.id)


def test_update_delete_and_include_deleted(client: Kernel) -> None:
    s = client.browsers.create(headless=True, name="py-update", timeout_seconds=60)
    try:
        updated = client.browsers.update(s.session_id, name="py-renamed", tags={"k": "v"})
        assert updated.name == "py-renamed"
        assert client.browsers.retrieve("py-renamed").session_id == s.session_id
        with pytest.raises(kernel.NotFoundError):
            client.browsers.retrieve("py-update")
        # A 409: the name is taken by an active session.
        with pytest.raises(kernel.ConflictError):
            client.browsers.create(headless=True, name="py-renamed")
    finally:
        raw = client.browsers.with_raw_response.delete_by_id(s.session_id)
        assert raw.status_code == 204
        assert raw.parse() is None  # an empty 204 body decodes to None
    with pytest.raises(kernel.NotFoundError):
        client.browsers.retrieve(s.session_id)
    gone = client.browsers.retrieve(s.session_id, include_deleted=True)
    assert gone.session_id == s.session_id
    assert isinstance(gone.deleted_at, dt.datetime)


def test_list_paging_and_filters(client: Kernel) -> None:
    made = [client.browsers.create(headless=True, name=f"py-page-{i}", tags={"paging": "py"}) for i in range(2)]
    try:
        page = client.browsers.list(limit=1, tags={"paging": "py"})
        assert len(page.items) == 1
        assert page.has_next_page()
        # Auto-paging follows X-Next-Offset until X-Has-More is false.
        ids = {b.session_id for b in client.browsers.list(limit=1, tags={"paging": "py"})}
        assert ids == {b.session_id for b in made}
        second = client.browsers.list(limit=1, offset=1, tags={"paging": "py"})
        assert len(second.items) == 1 and not second.has_next_page()
        assert {b.session_id for b in client.browsers.list(query="py-page-1")} == {made[1].session_id}
    finally:
        for b in made:
            client.browsers.delete_by_id(b.session_id)
    everything = {b.session_id for b in client.browsers.list(status="all", tags={"paging": "py"})}
    assert {b.session_id for b in made} <= everything
    assert not list(client.browsers.list(status="active", tags={"paging": "py"}))


def test_error_classes(server, client: Kernel) -> None:
    with pytest.raises(kernel.NotFoundError) as nf:
        client.browsers.retrieve("nosuchbrowser0000000000")
    assert nf.value.status_code == 404
    assert isinstance(nf.value.body, dict) and nf.value.body.get("code") == "not_found"

    bad = Kernel(api_key="sk_wrong", base_url=server.base_url, max_retries=0)
    with pytest.raises(kernel.AuthenticationError):
        bad.browsers.list()

    with pytest.raises(kernel.BadRequestError) as br:
        client.browsers.create(headless=True, timeout_seconds=-5)
    assert isinstance(br.value.body, dict) and br.value.body.get("code")

    # A part Hangar does not have says so (501), and the SDK does not retry it.
    with pytest.raises(kernel.APIStatusError) as ni:
        client.browsers.create(headless=True, gpu=True)
    assert ni.value.status_code == 501
    assert ni.value.response.headers.get("x-should-retry") == "false"


def test_rate_limit_429(server, client: Kernel) -> None:
    project = client.projects.create(name="py-limited")
    client.projects.limits.update(project.id, max_concurrent_sessions=1)
    scoped = Kernel(api_key=server.api_key, base_url=server.base_url, project_id=project.id, max_retries=0)
    first = scoped.browsers.create(headless=True)
    try:
        with pytest.raises(kernel.RateLimitError) as rl:
            scoped.browsers.create(headless=True)
        assert rl.value.response.headers.get("retry-after")
        # Another project's resource is a 404 from here.
        with pytest.raises(kernel.NotFoundError):
            client.browsers.retrieve(first.session_id)
    finally:
        scoped.browsers.delete_by_id(first.session_id)
    client.projects.delete(project.id)
