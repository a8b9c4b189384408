"""Project-level resources through the Python SDK (sync): profiles, the extension library
(upload is the multipart seed operation), credentials (write-only values, TOTP), proxies, and the
organisation (API keys, projects)."""

from __future__ import annotations

import datetime as dt
import io
import json
import zipfile

import pytest

import kernel
from kernel import Kernel


def mv3_zip(mark: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("manifest.json", json.dumps({"manifest_version": 3, "name": f"py {mark}", "version": "1.0"}))
    return buf.getvalue()


def test_profiles(client: Kernel) -> None:
    p = client.profiles.create(name="py-profile")
    assert p.name == "py-profile" and isinstance(p.created_at, dt.datetime)
    assert client.profiles.retrieve("py-profile").id == p.id
    assert client.profiles.retrieve(p.id).name == "py-profile"
    assert p.id in {x.id for x in client.profiles.list()}
    with pytest.raises(kernel.ConflictError):
        client.profiles.create(name="py-profile")
    assert client.profiles.delete(p.id) is None
    with pytest.raises(kernel.NotFoundError):
        client.profiles.retrieve(p.id)


def test_extension_library_upload(client: Kernel) -> None:
    ext = client.extensions.upload(file=("py.zip", mv3_zip("lib")), name="py-lib-ext")
    assert ext.name == "py-lib-ext" and ext.size_bytes > 0
    assert isinstance(ext.created_at, dt.datetime)
    assert client.extensions.get("py-lib-ext").id == ext.id
    assert "py-lib-ext" in {e.name for e in client.extensions.list()}
    data = client.extensions.download("py-lib-ext").read()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert "manifest.json" in z.namelist()
    with pytest.raises(kernel.BadRequestError):
        client.extensions.upload(file=("bad.zip", b"not a zip"), name="py-bad")
    client.extensions.delete(ext.id)
    with pytest.raises(kernel.NotFoundError):
        client.extensions.get(ext.id)


def test_credentials(server, client: Kernel) -> None:
    c = client.credentials.create(name="py-cred", domain="py.test", values={"username": "u", "password": "hunter2-py"},
                                  totp_secret="JBSWY3DPEHPK3PXP")
    assert c.has_values and c.has_totp_secret
    assert "hunter2-py" not in c.model_dump_json()  # write-only
    assert client.credentials.retrieve("py-cred").id == c.id
    code = client.credentials.totp_code("py-cred")
    assert len(code.code) == 6 and code.code.isdigit()
    assert isinstance(code.expires_at, dt.datetime)
    page = client.credentials.list(domain="py.test", limit=1)
    assert [x.id for x in page.items] == [c.id]
    u = client.credentials.update("py-cred", values={"password": "new"}, remove_value_keys=["username"])
    assert u.id == c.id
    client.credentials.delete("py-cred")
    with pytest.raises(kernel.NotFoundError):
        client.credentials.retrieve(c.id)


def test_proxies(client: Kernel) -> None:
    p = client.proxies.create(type="custom", name="py-proxy", protocol="http",
                              config={"host": "127.0.0.1", "port": 21099, "username": "u", "password": "pw-secret"})
    assert p.name == "py-proxy" and p.type == "custom"
    assert "pw-secret" not in p.model_dump_json()
    assert client.proxies.retrieve(p.id).name == "py-proxy"
    assert p.id in {x.id for x in client.proxies.list(name="py-proxy")}
    client.proxies.delete(p.id)
    with pytest.raises(kernel.NotFoundError):
        client.proxies.retrieve(p.id)
    with pytest.raises(kernel.BadRequestError):
        client.proxies.create(type="custom", config={"host": ""})


def test_org_api_keys_and_projects(server, client: Kernel) -> None:
    project = client.projects.create(name="py-org-project")
    assert client.projects.retrieve(project.id).name == "py-org-project"
    assert project.id in {p.id for p in client.projects.list()}

    made = client.api_keys.create(name="py-key", project_id=project.id, days_to_expire=30)
    assert made.key and isinstance(made.expires_at, dt.datetime)
    listed = {k.id for k in client.api_keys.list(query="py-key")}
    assert made.id in listed
    renamed = client.api_keys.update(made.id, name="py-key-2")
    assert renamed.name == "py-key-2"

    scoped = Kernel(api_key=made.key, base_url=server.base_url, max_retries=0)
    assert list(scoped.browsers.list()) == []
    with pytest.raises(kernel.PermissionDeniedError):
        scoped.projects.create(name="py-not-allowed")

    client.api_keys.delete(made.id)
    with pytest.raises(kernel.AuthenticationError):
        scoped.browsers.list()
    client.projects.delete(project.id)
    with pytest.raises(kernel.NotFoundError):
        client.projects.retrieve(project.id)
