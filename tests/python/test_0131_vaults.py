"""Vaults (kernel-api-0131.md §1A, §1B; issue 48) through the official Python SDK 0.131: vaults and
their scoping, items (create-or-get, conflicts, optimistic concurrency, the clearing rules), the
`wait` long-poll and events woken by another client, payment items stored but never operated,
provider configs, a local login page filled from a vault item and a WebMCP tool invoked with vault
values, each checked from the page itself, and the server's output searched for every secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import secrets
import struct
import threading
import time
from typing import Iterator

import pytest

import kernel
from kernel import Kernel

from conftest import ALLOWED_PORTS, launched, reply, serving, wait_for

# Every secret this module stores: none may ever appear in the server's output or a response.
PASSWORD = "pw-" + secrets.token_hex(12)
OTHER_PASSWORD = "pw2-" + secrets.token_hex(12)
TOTP_SEED = base64.b32encode(secrets.token_bytes(20)).decode().rstrip("=")
MCP_PASSWORD = "mcp-" + secrets.token_hex(12)
MA_PASSWORD = "ma-" + secrets.token_hex(12)
CLIENT_SECRET = "cs-" + secrets.token_hex(12)
LINK_ACCESS = "la-" + secrets.token_hex(12)
CONNECT_PASSWORD = "op-" + secrets.token_hex(12)
CONNECT_TOKEN = "ct-" + secrets.token_hex(12)
USERNAME = "ada@example.com"


def rfc6238(secret_b32: str, t: float) -> str:
    key = base64.b32decode(secret_b32 + "=" * (-len(secret_b32) % 8))
    mac = hmac.new(key, struct.pack(">Q", int(t) // 30), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    return str((struct.unpack(">I", mac[offset:offset + 4])[0] & 0x7FFFFFFF) % 10**6).zfill(6)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def login_spec(password: str = PASSWORD, *, with_totp: bool = True) -> dict:
    fields = [
        {"name": "username", "type": "email", "sensitive": False, "required": True, "value": USERNAME},
        {"name": "password", "type": "password", "required": True, "value": password},
    ]
    if with_totp:
        fields.append({"name": "otp", "type": "totp", "value": TOTP_SEED})
    return {"provider": "kernel", "fields": fields, "description": "Shop login"}


def ops(item) -> set[str]:
    return {o.type for o in item.available_operations}


@pytest.fixture(scope="module")
def vault(client: Kernel) -> Iterator[object]:
    v = client.vaults.upsert(name="py-vault")
    try:
        yield v
    finally:
        try:
            client.vaults.delete(v.id)
        except kernel.NotFoundError:
            pass


# ---- vaults -------------------------------------------------------------------------------------


def test_vaults_create_or_get_list_key_and_delete(client: Kernel) -> None:
    a = client.vaults.upsert(name="py-crud")
    try:
        assert client.vaults.upsert(name="py-crud").id == a.id  # create-or-get by name
        assert client.vaults.retrieve("py-crud").id == a.id
        assert client.vaults.retrieve(a.id).name == "py-crud"
        b = client.vaults.upsert(name="py-other")
        try:
            names = [v.name for v in client.vaults.list(query="CRUD")]
            assert names == ["py-crud"]
            assert [v.id for v in client.vaults.list(query=b.id)] == [b.id]  # exact match on id
            page = client.vaults.list(limit=1)
            assert len(page.items) == 1 and page.has_next_page()
        finally:
            client.vaults.delete(b.id)

        # Counted in the organisation's limits; no cap on a self-hosted server.
        limits = client.organization.limits.retrieve()
        assert limits.vaults_used >= 1 and limits.max_vaults is None
        ent = client.organization.entitlements.retrieve()
        assert ent.features.vaults.enabled is True and ent.limits.max_vaults is None

        k = client.vaults.retrieve_encryption_key(a.id)
        assert (k.alg, k.enc, k.jwk.kty, k.jwk.crv) == ("ECDH-ES", "A256GCM", "EC", "P-256")
        assert len(base64.urlsafe_b64decode(k.jwk.x + "==")) == 32
        assert client.vaults.retrieve_encryption_key("py-crud") == k  # stable for the vault's lifetime
    finally:
        client.vaults.delete(a.id)
    with pytest.raises(kernel.NotFoundError):
        client.vaults.retrieve(a.id)
    with pytest.raises(kernel.BadRequestError):
        client.vaults.upsert(name="not a name")


def test_a_project_scoped_key_cannot_read_or_use_another_projects_vault(server, client: Kernel, vault) -> None:
    project = client.projects.create(name="py-vaults-other")
    made = client.api_keys.create(name="py-vaults-scoped", project_id=project.id)
    try:
        scoped = Kernel(api_key=made.key, base_url=server.base_url, max_retries=0)
        for fn in (lambda: scoped.vaults.retrieve(vault.id), lambda: scoped.vaults.retrieve("py-vault"),
                   lambda: scoped.vaults.items.list(vault.id)):
            with pytest.raises(kernel.NotFoundError):
                fn()
        assert vault.id not in [v.id for v in scoped.vaults.list()]
        # Nor attach it to a browser of its own project.
        with pytest.raises(kernel.NotFoundError):
            scoped.browsers.create(headless=True, vaults=[{"id": vault.id}])
        # Nor to a pool of its own project (0.131's SDK types no `vaults` on pools: extra_body).
        with pytest.raises(kernel.NotFoundError):
            scoped.browser_pools.create(size=0, extra_body={"vaults": [{"id": vault.id}]})
        # Its own vault of the same name is another vault.
        own = scoped.vaults.upsert(name="py-vault")
        assert own.id != vault.id
        scoped.vaults.delete(own.id)  # a project with resources cannot be deleted
        # Provider configs are the organisation's: a project-scoped key may not create them.
        with pytest.raises(kernel.PermissionDeniedError):
            scoped.vault_provider_configs.create(provider="link", name="scoped",
                                                 credentials={"client_id": "c", "client_secret": CLIENT_SECRET})
    finally:
        client.api_keys.delete(made.id)
        client.projects.delete(project.id)


# ---- items --------------------------------------------------------------------------------------


def test_item_put_identity_conflict_patch_and_versions(client: Kernel, vault) -> None:
    items = client.vaults.items
    item = items.upsert("shop", id_or_name=vault.id, type="credential", spec=login_spec())
    try:
        assert item.type == "credential" and item.version == 1 and item.key == "shop"
        assert item.state.status == "ready"
        f = item.state.fields
        assert f["username"].has_value and f["username"].value == USERNAME  # non-sensitive: shown
        assert f["password"].has_value and f["password"].value is None  # write-only
        assert f["otp"].has_value and f["otp"].value is None
        assert [d.name for d in item.spec.fields] == ["username", "password", "otp"]
        assert ops(item) == {"fill", "webmcp_invoke", "collect"}
        assert item.action is None  # ready: no collection link until collect is invoked
        assert PASSWORD not in item.model_dump_json() and TOTP_SEED not in item.model_dump_json()

        # Create-or-get: the identical spec is the same item; another spec under the key is 409.
        assert items.upsert("shop", id_or_name=vault.id, type="credential", spec=login_spec()).id == item.id
        with pytest.raises(kernel.ConflictError):
            items.upsert("shop", id_or_name=vault.id, type="credential", spec=login_spec(OTHER_PASSWORD))
        assert [i.key for i in items.list(vault.id)] == ["shop"]

        # PATCH needs the current version; a stale one is 409 and changes nothing.
        v2 = items.update("shop", id_or_name=vault.id, type="credential", version=1,
                          spec={"fields": {"password": {"value": OTHER_PASSWORD}}})
        assert v2.version == 2
        with pytest.raises(kernel.ConflictError):
            items.update("shop", id_or_name=vault.id, type="credential", version=1,
                         spec={"fields": {"password": {"value": PASSWORD}}})
        with pytest.raises(kernel.ConflictError):
            items.update("shop", id_or_name=vault.id, type="credential", version=2, expected_item_id="someone-else",
                         spec={"description": ""})
        # remove, then add, then values; clearing a required password reopens collection.
        v3 = items.update("shop", id_or_name=vault.id, type="credential", version=2, spec={
            "remove_fields": ["otp"],
            "add_fields": [{"name": "pin", "type": "text", "sensitive": True}],
            "fields": {"password": {"value": None}, "pin": {"value": "1234"}}})
        assert v3.version == 3 and v3.state.status == "pending_collection"
        assert set(v3.state.fields) == {"username", "password", "pin"}
        assert not v3.state.fields["password"].has_value and v3.state.fields["pin"].has_value
        assert ops(v3) == {"collect"}  # nothing to fill with until it is ready again
        with pytest.raises(kernel.ConflictError):
            items.perform_operation("shop", id_or_name=vault.id, type="fill", browser_id="nope")
        with pytest.raises(kernel.BadRequestError):  # a definition is never edited in place
            items.update("shop", id_or_name=vault.id, type="credential", version=3,
                         spec={"add_fields": [{"name": "pin", "type": "password"}]})
        with pytest.raises(kernel.BadRequestError):
            items.update("shop", id_or_name=vault.id, type="credential", version=3,
                         spec={"remove_fields": ["nope"]})
        # Card data never goes into a credential.
        with pytest.raises(kernel.BadRequestError):
            items.upsert("card-in-credential", id_or_name=vault.id, type="credential", spec={
                "provider": "kernel", "fields": [{"name": "n", "type": "text", "value": "4242 4242 4242 4242"}]})
        with pytest.raises(kernel.BadRequestError):
            items.upsert("bad-totp", id_or_name=vault.id, type="credential", spec={
                "provider": "kernel", "fields": [{"name": "t", "type": "totp", "value": "not base32!"}]})
    finally:
        items.delete("shop", id_or_name=vault.id)
    with pytest.raises(kernel.NotFoundError):
        items.retrieve("shop", id_or_name=vault.id)


# ---- a customer-side JWE (ECDH-ES + A256GCM), written here: P-256 in Python, AES-GCM from libcrypto ----

P256_P = 2**256 - 2**224 + 2**192 + 2**96 - 1
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
P256_G = (0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
          0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5)


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if a[0] == b[0] and (a[1] + b[1]) % P256_P == 0:
        return None
    if a == b:
        m = (3 * a[0] * a[0] - 3) * pow(2 * a[1], P256_P - 2, P256_P)
    else:
        m = (b[1] - a[1]) * pow(b[0] - a[0], P256_P - 2, P256_P)
    x = (m * m - a[0] - b[0]) % P256_P
    return x, (m * (a[0] - x) - a[1]) % P256_P


def _mul(k: int, point):
    out = None
    while k:
        if k & 1:
            out = _add(out, point)
        point = _add(point, point)
        k >>= 1
    return out


def _aes_gcm(key: bytes, iv: bytes, aad: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
    import ctypes
    import ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("crypto"))
    lib.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
    lib.EVP_aes_256_gcm.restype = ctypes.c_void_p
    for f in ("EVP_EncryptInit_ex", "EVP_EncryptUpdate", "EVP_EncryptFinal_ex", "EVP_CIPHER_CTX_ctrl"):
        getattr(lib, f).argtypes = None
    lib.EVP_CIPHER_CTX_free.argtypes = [ctypes.c_void_p]
    ctx = ctypes.c_void_p(lib.EVP_CIPHER_CTX_new())
    n = ctypes.c_int()
    out = ctypes.create_string_buffer(len(plaintext) + 16)
    tag = ctypes.create_string_buffer(16)
    ok = (lib.EVP_EncryptInit_ex(ctx, ctypes.c_void_p(lib.EVP_aes_256_gcm()), None, None, None) == 1
          and lib.EVP_CIPHER_CTX_ctrl(ctx, 0x9, 12, None) == 1  # EVP_CTRL_GCM_SET_IVLEN
          and lib.EVP_EncryptInit_ex(ctx, None, None, key, iv) == 1
          and lib.EVP_EncryptUpdate(ctx, None, ctypes.byref(n), aad, len(aad)) == 1
          and lib.EVP_EncryptUpdate(ctx, out, ctypes.byref(n), plaintext, len(plaintext)) == 1)
    written = n.value
    ok = ok and lib.EVP_EncryptFinal_ex(ctx, ctypes.byref(out, written), ctypes.byref(n)) == 1
    ok = ok and lib.EVP_CIPHER_CTX_ctrl(ctx, 0x10, 16, tag) == 1  # EVP_CTRL_GCM_GET_TAG
    lib.EVP_CIPHER_CTX_free(ctx)
    assert ok, "libcrypto's AES-256-GCM failed"
    return out.raw[:written + n.value], tag.raw


def jwe_for(key, plaintext: str) -> str:
    """RFC 7516 compact JWE for a vault's encryption_key, as a customer-hosted form makes it."""
    def coord(b64: str) -> int:
        return int.from_bytes(base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)), "big")
    peer = (coord(key.jwk.x), coord(key.jwk.y))
    d = secrets.randbelow(P256_N - 1) + 1
    eph = _mul(d, P256_G)
    z = _mul(d, peer)[0].to_bytes(32, "big")
    alg = b"A256GCM"
    cek = hashlib.sha256(struct.pack(">I", 1) + z + struct.pack(">I", len(alg)) + alg + struct.pack(">I", 0)
                         + struct.pack(">I", 0) + struct.pack(">I", 256)).digest()
    header = b64url(json.dumps({"alg": "ECDH-ES", "enc": "A256GCM", "kid": key.kid, "epk": {
        "kty": "EC", "crv": "P-256", "x": b64url(eph[0].to_bytes(32, "big")),
        "y": b64url(eph[1].to_bytes(32, "big"))}}).encode())
    iv = secrets.token_bytes(12)
    cipher, tag = _aes_gcm(cek, iv, header.encode(), plaintext.encode())
    return f"{header}..{b64url(iv)}.{b64url(cipher)}.{b64url(tag)}"


def test_encrypted_values_are_decrypted_with_the_vaults_own_key(client: Kernel, vault) -> None:
    items = client.vaults.items
    key = client.vaults.retrieve_encryption_key(vault.id)
    item = items.upsert("enc-ok", id_or_name=vault.id, type="credential", spec={"provider": "kernel", "fields": [
        {"name": "user", "type": "text", "sensitive": False, "encrypted_value": jwe_for(key, "grace-hopper")},
        {"name": "password", "type": "password", "encrypted_value": jwe_for(key, OTHER_PASSWORD)}]})
    try:
        assert item.state.fields["user"].value == "grace-hopper"  # decrypted on arrival, shown: non-sensitive
        assert item.state.fields["password"].has_value and item.state.status == "ready"
        # PATCH takes encrypted values too.
        v2 = items.update("enc-ok", id_or_name=vault.id, type="credential", version=1,
                          spec={"fields": {"user": {"encrypted_value": jwe_for(key, "ada-lovelace")}}})
        assert v2.state.fields["user"].value == "ada-lovelace" and v2.version == 2
        # A byte changed in the ciphertext does not verify.
        bad = jwe_for(key, "x").split(".")
        bad[3] = b64url(bytes([base64.urlsafe_b64decode(bad[3] + "==")[0] ^ 1]))
        with pytest.raises(kernel.BadRequestError) as e:
            items.update("enc-ok", id_or_name=vault.id, type="credential", version=2,
                         spec={"fields": {"user": {"encrypted_value": ".".join(bad)}}})
        assert e.value.body["code"] == "invalid_request"
    finally:
        items.delete("enc-ok", id_or_name=vault.id)


def test_encrypted_values_for_another_vaults_key_are_refused(client: Kernel, vault) -> None:
    other = client.vaults.upsert(name="py-enc-other")
    try:
        other_kid = client.vaults.retrieve_encryption_key(other.id).kid
        client.vaults.retrieve_encryption_key(vault.id)
        header = b64url(json.dumps({"alg": "ECDH-ES", "enc": "A256GCM", "kid": other_kid,
                                    "epk": {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}}).encode())
        jwe = f"{header}..{b64url(b'0' * 12)}.{b64url(b'x')}.{b64url(b'0' * 16)}"
        with pytest.raises(kernel.BadRequestError) as e:
            client.vaults.items.upsert("enc", id_or_name=vault.id, type="credential", spec={
                "provider": "kernel", "fields": [{"name": "p", "type": "password", "encrypted_value": jwe}]})
        assert e.value.body["code"] == "encryption_key_mismatch"
        with pytest.raises(kernel.BadRequestError) as e:
            client.vaults.items.upsert("enc", id_or_name=vault.id, type="credential", spec={
                "provider": "kernel", "fields": [{"name": "p", "type": "password", "encrypted_value": "garbage"}]})
        assert e.value.body["code"] == "invalid_request"
    finally:
        client.vaults.delete(other.id)


def test_wait_long_poll_and_events_are_woken_by_another_client(server, client: Kernel, vault) -> None:
    items = client.vaults.items
    other = Kernel(api_key=server.api_key, base_url=server.base_url, max_retries=0)
    spec = {"provider": "kernel", "fields": [
        {"name": "username", "type": "text", "sensitive": False, "required": True, "value": "ada"},
        {"name": "password", "type": "password", "required": True}]}
    item = items.upsert("pending", id_or_name=vault.id, type="credential", spec=spec)
    try:
        assert item.state.status == "pending_collection"
        got: dict = {}

        def long_poll() -> None:
            start = time.monotonic()
            got["item"] = items.retrieve("pending", id_or_name=vault.id, wait=30)
            got["seconds"] = time.monotonic() - start

        t = threading.Thread(target=long_poll)
        t.start()
        time.sleep(1.5)
        other.vaults.items.update("pending", id_or_name=vault.id, type="credential", version=1,
                                  spec={"fields": {"password": {"value": PASSWORD}}})
        t.join(40)
        assert got["item"].state.status == "ready" and got["item"].version == 2
        assert 1.0 < got["seconds"] < 15, got["seconds"]
        # A ready item answers at once, whatever the wait.
        start = time.monotonic()
        items.retrieve("pending", id_or_name=vault.id, wait=30)
        assert time.monotonic() - start < 5

        events = items.events("pending", id_or_name=vault.id)
        assert [e.name for e in events] == ["item_created", "collection_started", "item_updated"]
        assert events[2].data["changed_fields"] == ["password"] and events[2].data["version"] == 2
        # Nothing after the last one yet: `wait` holds until another client changes the item.
        seen: dict = {}

        def wait_events() -> None:
            start = time.monotonic()
            seen["events"] = items.events("pending", id_or_name=vault.id, after=events[-1].id, wait=30)
            seen["seconds"] = time.monotonic() - start

        t = threading.Thread(target=wait_events)
        t.start()
        time.sleep(1.5)
        other.vaults.items.update("pending", id_or_name=vault.id, type="credential", version=2,
                                  spec={"description": "now described"})
        t.join(40)
        assert [e.name for e in seen["events"]] == ["item_updated"]
        assert 1.0 < seen["seconds"] < 15, seen["seconds"]
        assert items.events("pending", id_or_name=vault.id, after=seen["events"][0].id) == []
        for e in items.events("pending", id_or_name=vault.id):
            assert PASSWORD not in json.dumps(e.model_dump(mode="json"))
    finally:
        items.delete("pending", id_or_name=vault.id)


@pytest.fixture(scope="module")
def connection(client: Kernel) -> Iterator[object]:
    """An auth connection whose login is a saved credential (what managed_auth items reference)."""
    client.credentials.create(name="py-ma-cred", domain="localhost",
                              values={"username": "grace@example.com", "password": MA_PASSWORD})
    conn = client.auth.connections.create(domain="localhost", profile_name="py-ma-profile",
                                          credential={"name": "py-ma-cred"})
    try:
        yield conn
    finally:
        client.auth.connections.delete(conn.id)
        client.credentials.delete("py-ma-cred")


def test_managed_auth_items_reference_a_connection_with_a_saved_credential(client: Kernel, vault, connection) -> None:
    items = client.vaults.items
    item = items.upsert("ma", id_or_name=vault.id, type="credential",
                        spec={"provider": "managed_auth", "connection_id": connection.id})
    try:
        assert item.spec.provider == "managed_auth" and item.spec.connection_id == connection.id
        assert (item.state.provider, item.state.status, item.version) == ("managed_auth", "ready", 1)
        assert ops(item) == {"fill"}
        assert MA_PASSWORD not in item.model_dump_json()
        # state.fields: the saved credential's value names and types (single-item reads), never a value.
        expected = {"username": "text", "password": "password"}
        assert {k: f.type for k, f in (item.state.fields or {}).items()} == expected
        got = items.retrieve("ma", id_or_name=vault.id)
        assert {k: f.type for k, f in (got.state.fields or {}).items()} == expected
        assert MA_PASSWORD not in got.model_dump_json() and "grace@example.com" not in got.model_dump_json()
        listed = next(i for i in items.list(vault.id) if i.key == "ma")
        assert listed.state.fields is None  # omitted from lists, as value_keys on credentials
        with pytest.raises(kernel.NotFoundError):
            items.upsert("ma-unknown", id_or_name=vault.id, type="credential",
                         spec={"provider": "managed_auth", "connection_id": "nope"})
        # Its values are the connection's: it is never patched.
        with pytest.raises(kernel.ConflictError):
            items.update("ma", id_or_name=vault.id, type="credential", version=1, spec={"description": "x"})
    finally:
        items.delete("ma", id_or_name=vault.id)
    # A connection without a saved credential cannot back an item.
    bare = client.auth.connections.create(domain="localhost", profile_name="py-ma-bare")
    try:
        with pytest.raises(kernel.ConflictError):
            items.upsert("ma-bare", id_or_name=vault.id, type="credential",
                         spec={"provider": "managed_auth", "connection_id": bare.id})
    finally:
        client.auth.connections.delete(bare.id)


def test_a_person_fills_the_hosted_collection_form(server, client: Kernel, vault) -> None:
    import httpx
    items = client.vaults.items
    other = Kernel(api_key=server.api_key, base_url=server.base_url, max_retries=0)
    item = items.upsert("collected", id_or_name=vault.id, type="credential", spec={
        "provider": "kernel", "description": "Shop <login>", "fields": [
            {"name": "username", "type": "email", "sensitive": False, "required": True, "value": USERNAME,
             "label": "Email"},
            {"name": "password", "type": "password", "required": True},
            {"name": "otp", "type": "totp", "value": TOTP_SEED}]})
    try:
        # A pending item always carries the hosted form's link, the same one until it is used.
        assert item.state.status == "pending_collection" and item.action.name == "collect"
        url = item.action.url
        assert url.startswith(server.base_url + "/vaults/collect/")
        assert 29 * 60 < (item.action.expires_at.timestamp() - time.time()) <= 30 * 60
        assert items.retrieve("collected", id_or_name=vault.id).action.url == url
        assert [i.action.url for i in items.list(vault.id) if i.key == "collected"] == [url]

        page = httpx.get(url)
        assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
        assert 'name="f.username"' in page.text and f'value="{USERNAME}"' in page.text
        assert 'name="f.password" type="password"' in page.text and "f.otp" not in page.text  # no TOTP input
        assert "Shop &lt;login&gt;" in page.text and "<login>" not in page.text

        got: dict = {}
        t = threading.Thread(target=lambda: got.setdefault("item", other.vaults.items.retrieve(
            "collected", id_or_name=vault.id, wait=30)))
        t.start()
        refused = httpx.post(url, data={"f.username": USERNAME, "f.password": ""})
        assert refused.status_code == 400 and "fields.password" in refused.text  # required, still the form
        saved = httpx.post(url, data={"f.username": USERNAME, "f.password": PASSWORD})
        assert saved.status_code == 200 and "Saved" in saved.text, saved.text
        t.join(40)
        done = got["item"]
        assert done.state.status == "ready" and done.version == 2 and done.action is None
        assert done.state.fields["password"].has_value and done.state.fields["otp"].has_value
        assert httpx.get(url).status_code == 410  # one submission
        assert url.rsplit("/", 1)[1] not in server.output()  # a bearer secret: the access log redacts it
        assert httpx.post(url, data={"f.password": "again"}).status_code == 410
        names = [(e.name, (e.data or {}).get("source")) for e in items.events("collected", id_or_name=vault.id)]
        assert names == [("item_created", None), ("collection_started", None), ("item_updated", "collection")]

        # collect on a ready item issues a link; a PATCH supersedes it.
        again = items.perform_operation("collected", id_or_name=vault.id, type="collect")
        assert again.action.name == "collect" and again.action.url != url
        items.update("collected", id_or_name=vault.id, type="credential", version=2, spec={"description": "x"})
        assert httpx.get(again.action.url).status_code == 410
        assert items.retrieve("collected", id_or_name=vault.id).action is None
    finally:
        items.delete("collected", id_or_name=vault.id)


def test_payment_items_are_stored_and_their_operations_say_what_is_missing(client: Kernel, vault) -> None:
    items = client.vaults.items
    cfg = client.vault_provider_configs.create(provider="link", name="py-link", credentials={
        "client_id": "cid", "client_secret": CLIENT_SECRET, "publishable_key": "pk_test"})
    try:
        assert (cfg.provider, cfg.name, cfg.client_id, cfg.publishable_key) == ("link", "py-link", "cid", "pk_test")
        assert CLIENT_SECRET not in cfg.model_dump_json()
        with pytest.raises(kernel.ConflictError):
            client.vault_provider_configs.create(provider="link", name="PY-LINK",
                                                 credentials={"client_id": "x", "client_secret": "y"})
        renamed = client.vault_provider_configs.update("py-link", name="py-link-2",
                                                       credentials={"client_secret": CLIENT_SECRET + "x"})
        assert renamed.name == "py-link-2" and renamed.client_id == "cid"
        assert [c.name for c in client.vault_provider_configs.list()] == ["py-link-2"]

        wallet = items.upsert("wallet", id_or_name=vault.id, type="wallet", spec={
            "provider": "link", "authorization": {"method": "oauth", "client": {
                "type": "customer_managed", "provider_config": {"name": "py-link-2"}},
                "tokens": {"access_token": LINK_ACCESS, "refresh_token": LINK_ACCESS + "r"}}})
        assert wallet.type == "wallet" and wallet.state.status == "degraded"
        assert LINK_ACCESS not in wallet.model_dump_json()
        assert ops(wallet) == set()
        # Referenced: the config stays.
        with pytest.raises(kernel.ConflictError):
            client.vault_provider_configs.delete("py-link-2")

        card = items.upsert("card", id_or_name=vault.id, type="card", spec={
            "provider": "kernel", "wallet": "wallet", "amount": 1999, "currency": "usd",
            "merchant_name": "Shop", "merchant_url": "https://shop.example"})
        assert card.state.status == "requested" and ops(card) == set()
        with pytest.raises(kernel.InternalServerError) as e:  # 501: no payment is made
            items.perform_operation("card", id_or_name=vault.id, type="authorize")
        assert e.value.status_code == 501 and e.value.body["code"] == "not_implemented"
        with pytest.raises(kernel.BadRequestError):
            items.upsert("card2", id_or_name=vault.id, type="card", spec={
                "provider": "kernel", "wallet": "wallet", "amount": 1999, "currency": "xyz",
                "merchant_name": "Shop", "merchant_url": "https://shop.example"})
        # Expansions are fetched from the provider, which Hangar does not have: 409, no partial item.
        with pytest.raises(kernel.ConflictError):
            items.retrieve("wallet", id_or_name=vault.id, expand=["payment_methods"])
        items.delete("card", id_or_name=vault.id)
        items.delete("wallet", id_or_name=vault.id)
        client.vault_provider_configs.delete("py-link-2")
    finally:
        try:
            client.vault_provider_configs.delete(cfg.id)
        except (kernel.NotFoundError, kernel.ConflictError):
            pass


# ---- operations in a browser ------------------------------------------------------------------

LOGIN_PAGE = """<!doctype html><html><head><title>Shop login</title></head><body>
<form id="login" action="/never-submitted" method="post">
  <label>Email <input name="email" id="email" type="email" autocomplete="username"></label>
  <label>Password <input name="pass" id="pass" type="password"></label>
  <label>Code <input name="code" id="code" autocomplete="one-time-code"></label>
  <label>Note <input id="ro" readonly></label>
  <button type="submit">Sign in</button>
</form>
<script>window.submitted = false; document.getElementById('login').addEventListener('submit', () => { window.submitted = true; });</script>
</body></html>"""

TOOL_PAGE = """<!doctype html><html><head><title>Shop tools</title></head><body>
<script>
  const mc = document.modelContext || navigator.modelContext;
  document.documentElement.dataset.webmcp = mc ? 'yes' : 'no';
  mc.registerTool({
    name: 'sign_in',
    description: 'Signs in',
    inputSchema: {type: 'object', properties: {login: {type: 'object'}, remember: {type: 'boolean'}}},
    execute: async ({login, remember}) => {
      window.received = JSON.stringify({login, remember});
      return {content: [{type: 'text', text: 'signed in as ' + login.user}]};
    },
  });
</script></body></html>"""


def test_a_pool_takes_vaults_and_the_browsers_it_hands_out_run_vault_operations(client: Kernel, vault,
                                                                                origin: str) -> None:
    """Pools take `vaults` as POST /browsers does (by id or name, in the project); each lease is
    attached to them. The 0.131 SDK types no `vaults` on pool create/update, so it goes in extra_body."""
    items = client.vaults.items
    items.upsert("pooled", id_or_name=vault.id, type="credential", spec=login_spec(with_totp=False))
    pools = client.browser_pools
    with pytest.raises(kernel.BadRequestError):
        pools.create(size=0, extra_body={"vaults": [{"id": vault.id, "name": "py-vault"}]})
    with pytest.raises(kernel.NotFoundError):
        pools.create(size=0, extra_body={"vaults": [{"name": "py-no-such-vault"}]})
    pool = pools.create(name="py-vault-pool", size=1, headless=True, timeout_seconds=300,
                        extra_body={"vaults": [{"name": "py-vault"}]})
    leased: list[str] = []
    try:
        assert pool.browser_pool_config.to_dict()["vaults"] == [{"id": vault.id, "name": "py-vault"}]
        b = pools.acquire(pool.id, acquire_timeout_seconds=50)
        assert b is not None
        leased.append(b.session_id)
        assert [(v.id, v.name) for v in b.vaults] == [(vault.id, "py-vault")]
        assert [v.name for v in client.browsers.retrieve(b.session_id).vaults] == ["py-vault"]
        url = f"{origin}/login?pool=1"
        goto(client, b.session_id, url)
        r = items.perform_operation("pooled", id_or_name=vault.id, type="fill", browser_id=b.session_id,
                                    page_url=url, fields=[{"field": "username", "selector": "#email"},
                                                          {"field": "password", "selector": "#pass"}])
        assert r.status == "completed", r
        assert page_eval(client, b.session_id, "document.getElementById('pass').value") == PASSWORD
        pools.release(pool.id, session_id=b.session_id)  # reused: the vaults plugin disarms it first
        leased.remove(b.session_id)

        # [] detaches: the next lease has no vault, and the operation is refused.
        updated = pools.update(pool.id, extra_body={"vaults": []})
        assert "vaults" not in updated.browser_pool_config.to_dict()
        b = pools.acquire(pool.id, acquire_timeout_seconds=50)
        assert b is not None
        leased.append(b.session_id)
        assert not b.vaults
        with pytest.raises(kernel.PermissionDeniedError):
            items.perform_operation("pooled", id_or_name=vault.id, type="fill", browser_id=b.session_id)
        pools.release(pool.id, session_id=b.session_id)
        leased.remove(b.session_id)
        # By id on PATCH, resolved again; another project's or an unknown vault is 404 there too.
        updated = pools.update(pool.id, extra_body={"vaults": [{"id": vault.id}]})
        assert updated.browser_pool_config.to_dict()["vaults"] == [{"id": vault.id, "name": "py-vault"}]
        with pytest.raises(kernel.NotFoundError):
            pools.update(pool.id, extra_body={"vaults": [{"id": "no-such-vault"}]})
        b = pools.acquire(pool.id, acquire_timeout_seconds=50)
        assert b is not None
        leased.append(b.session_id)
        assert [v.id for v in b.vaults] == [vault.id]
    finally:
        for sid in leased:
            pools.release(pool.id, session_id=sid, reuse=False)
        pools.delete(pool.id, force=True)
        items.delete("pooled", id_or_name=vault.id)


# A relying party on localhost (a secure context): registers a resident ES256 passkey, then signs in.
WEBAUTHN_PAGE = """<!doctype html><html><head><title>Passkeys</title></head><body><script>
const b64 = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf)));
window.register = async () => {
  const c = await navigator.credentials.create({publicKey: {
    challenge: crypto.getRandomValues(new Uint8Array(32)), rp: {name: 'Shop', id: 'localhost'},
    user: {id: new TextEncoder().encode('user-ada'), name: 'ada', displayName: 'Ada'},
    pubKeyCredParams: [{type: 'public-key', alg: -7}],
    authenticatorSelection: {residentKey: 'required', userVerification: 'preferred'}, timeout: 8000}});
  return c.id;
};
window.signIn = async () => {
  try {
    // Without an authenticator Chromium waits for a security key: give up after 3 s.
    const late = new Promise((resolve) => setTimeout(() => resolve(null), 3000));
    const a = await Promise.race([late, navigator.credentials.get({publicKey: {
      challenge: crypto.getRandomValues(new Uint8Array(32)), rpId: 'localhost', userVerification: 'preferred'}})]);
    if (!a) return {error: 'no answer'};
    return {id: a.id, user: new TextDecoder().decode(a.response.userHandle), signed: a.response.signature.byteLength > 0};
  } catch (e) { return {error: e.name}; }
};
</script></body></html>"""


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = (TOOL_PAGE if self.path.startswith("/tools") else WEBAUTHN_PAGE if self.path.startswith("/webauthn")
                else LOGIN_PAGE)
        reply(self, 200, body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    with serving(_Pages, range(ALLOWED_PORTS[0] + 120, ALLOWED_PORTS[0] + 140)) as port:
        yield f"http://localhost:{port}"


def goto(client: Kernel, sid: str, url: str) -> None:
    r = client.browsers.playwright.execute(sid, code=f"await page.goto({json.dumps(url)}); return page.url();")
    assert r.success is True, r


def page_eval(client: Kernel, sid: str, expression: str):
    r = client.browsers.playwright.execute(sid, code=f"return await page.evaluate(() => {expression});")
    assert r.success is True, r
    return r.result


def open_tab(client: Kernel, sid: str, url: str) -> None:
    """Another tab of the browser (a new page target), at `url`."""
    r = client.browsers.playwright.execute(sid, code=f"const p = await context.newPage(); "
                                                     f"await p.goto({json.dumps(url)}); return p.url();")
    assert r.success is True and r.result == url, r


def tab_eval(client: Kernel, sid: str, url: str, expression: str, *, reload: bool = False):
    """`expression` in the tab at exactly `url` (reloaded first: a sign-in still waiting ends)."""
    code = (f"const p = context.pages().find((t) => t.url() === {json.dumps(url)}); "
            + ("await p.reload(); " if reload else "") + f"return await p.evaluate(() => {expression});")
    r = client.browsers.playwright.execute(sid, code=code)
    assert r.success is True, r
    return r.result


def test_fill_a_login_page_and_invoke_a_webmcp_tool_with_vault_values(server, client: Kernel, vault, origin: str,
                                                                        connection) -> None:
    items = client.vaults.items
    items.upsert("ma", id_or_name=vault.id, type="credential",
                 spec={"provider": "managed_auth", "connection_id": connection.id})
    items.upsert("login", id_or_name=vault.id, type="credential", spec=login_spec())
    items.upsert("mcp", id_or_name=vault.id, type="credential", spec={"provider": "kernel", "fields": [
        {"name": "user", "type": "text", "sensitive": False, "value": "grace"},
        {"name": "password", "type": "password", "value": MCP_PASSWORD}]})
    elsewhere = client.vaults.upsert(name="py-not-attached")
    items.upsert("login", id_or_name=elsewhere.id, type="credential", spec=login_spec())
    b = client.browsers.create(headless=True, timeout_seconds=300, vaults=[{"name": "py-vault"}])
    try:
        assert [(v.id, v.name) for v in b.vaults] == [(vault.id, "py-vault")]
        assert [v.name for v in client.browsers.retrieve(b.session_id).vaults] == ["py-vault"]
        sid = b.session_id
        url = f"{origin}/login?next=%2Fcart#top"
        goto(client, sid, url)

        # Explicit selectors: one result per binding, in order; the TOTP field gets the current code.
        before = time.time()
        r = items.perform_operation("login", id_or_name=vault.id, type="fill", browser_id=sid, page_url=url, fields=[
            {"field": "username", "selector": "#email"}, {"field": "password", "selector": "input[name=pass]"},
            {"field": "otp", "selector": "#code"}], timeout_ms=5000)  # timeout_ms: accepted, ignored (§1A)
        after = time.time()
        assert r.type == "fill" and r.status == "completed", r
        assert [(f.index, f.status) for f in r.fields] == [(0, "filled"), (1, "filled"), (2, "filled")]
        seen = page_eval(client, sid, "({email: document.getElementById('email').value, "
                                      "pass: document.getElementById('pass').value, "
                                      "code: document.getElementById('code').value, submitted: window.submitted})")
        assert seen["email"] == USERNAME and seen["pass"] == PASSWORD and seen["submitted"] is False
        assert seen["code"] in {rfc6238(TOTP_SEED, before), rfc6238(TOTP_SEED, after)}
        assert PASSWORD not in r.model_dump_json()

        # What the page cannot take fails with a code; the rest is not attempted.
        r = items.perform_operation("login", id_or_name=vault.id, type="fill", browser_id=sid, fields=[
            {"field": "username", "selector": "#missing"}, {"field": "password", "selector": "#pass"}])
        assert r.status == "failed"
        assert [(f.status, f.error_code) for f in r.fields] == [("failed", "element_not_found"),
                                                                ("not_attempted", None)]
        r = items.perform_operation("login", id_or_name=vault.id, type="fill", browser_id=sid,
                                    fields=[{"field": "username", "selector": "input"}])
        assert r.fields[0].error_code == "ambiguous_selector"
        r = items.perform_operation("login", id_or_name=vault.id, type="fill", browser_id=sid,
                                    fields=[{"field": "username", "selector": "#ro"}])
        assert r.fields[0].error_code == "element_not_editable"

        # Without selectors the fields are found as managed auth finds them.
        goto(client, sid, url)
        r = items.perform_operation("login", id_or_name=vault.id, type="fill", browser_id=sid)
        assert r.status == "completed" and r.fields == []
        seen = page_eval(client, sid, "[document.getElementById('email').value, document.getElementById('pass').value,"
                                      " document.getElementById('code').value.length]")
        assert seen == [USERNAME, PASSWORD, 6]

        # A managed-auth item fills the connection's saved login, found the same way.
        goto(client, sid, url)
        r = items.perform_operation("ma", id_or_name=vault.id, type="fill", browser_id=sid, page_url=url)
        assert r.status == "completed", r
        seen = page_eval(client, sid, "[document.getElementById('email').value, document.getElementById('pass').value]")
        assert seen == ["grace@example.com", MA_PASSWORD]

        # page_url must match an open page exactly; a vault not attached to the browser is refused.
        with pytest.raises(kernel.NotFoundError):
            items.perform_operation("login", id_or_name=vault.id, type="fill", browser_id=sid, page_url=origin + "/x")
        with pytest.raises(kernel.PermissionDeniedError):
            items.perform_operation("login", id_or_name=elsewhere.id, type="fill", browser_id=sid)
        with pytest.raises(kernel.BadRequestError):
            items.perform_operation("login", id_or_name=vault.id, type="fill", browser_id=sid,
                                    fields=[{"field": "nope", "selector": "#email"}])

        # webmcp_invoke: vault values bound at null slots of the input, server-side.
        tool_url = f"{origin}/tools"
        goto(client, sid, tool_url)
        assert page_eval(client, sid, "document.documentElement.dataset.webmcp") == "yes"
        tool = wait_for(lambda: next((t for t in client.browsers.webmcp.list_tools(sid).tools
                                      if t.tool.name == "sign_in" and t.source.page_url == tool_url), None),
                        timeout=20, what="the sign_in tool")
        r = items.perform_operation("mcp", id_or_name=vault.id, type="webmcp_invoke", browser_id=sid,
                                    page_url=tool_url, tool_ref=tool.tool_ref,
                                    input={"login": {"user": None, "password": None}, "remember": True},
                                    bindings=[{"field": "user", "input_path": "/login/user"},
                                              {"field": "password", "input_path": "/login/password"}])
        assert r.type == "webmcp_invoke" and r.status == "completed", r
        assert r.output["content"][0]["text"] == "signed in as grace"
        received = json.loads(page_eval(client, sid, "window.received"))
        assert received == {"login": {"user": "grace", "password": MCP_PASSWORD}, "remember": True}
        with pytest.raises(kernel.BadRequestError):  # a pointer must name an existing null
            items.perform_operation("mcp", id_or_name=vault.id, type="webmcp_invoke", browser_id=sid,
                                    page_url=tool_url, tool_ref=tool.tool_ref, input={"login": {"user": "set"}},
                                    bindings=[{"field": "user", "input_path": "/login/user"}])

        # An item without passkey fields offers no passkey operation: 409.
        with pytest.raises(kernel.ConflictError):
            items.perform_operation("login", id_or_name=vault.id, type="arm_passkey", browser_id=sid)

        events = items.events("login", id_or_name=vault.id)
        fills = [e for e in events if e.name == "fill"]
        assert len(fills) == 5 and all(e.browser_id == sid for e in fills)
        assert [e.data["status"] for e in fills][:2] == ["completed", "failed"]
        assert [e.name for e in items.events("mcp", id_or_name=vault.id)] == ["item_created", "webmcp_invoke"]
    finally:
        client.browsers.delete_by_id(b.session_id)
        client.vaults.delete(elsewhere.id)
        items.delete("login", id_or_name=vault.id)
        items.delete("mcp", id_or_name=vault.id)
        items.delete("ma", id_or_name=vault.id)


def test_a_page_registers_a_passkey_into_the_vault_and_signs_in_with_it_on_every_tab(client: Kernel, vault, origin: str) -> None:
    items = client.vaults.items
    item = items.upsert("passkey", id_or_name=vault.id, type="credential", spec={"provider": "kernel", "fields": [
        {"name": "username", "type": "text", "sensitive": False, "value": "ada"},
        {"name": "passkey", "type": "passkey", "required": True}]})
    assert item.state.status == "pending_collection"
    assert ops(item) == {"collect", "register_passkey", "disarm_passkey"}
    b = client.browsers.create(headless=True, timeout_seconds=300, vaults=[{"id": vault.id}])
    try:
        sid = b.session_id
        url = f"{origin}/webauthn"
        goto(client, sid, url)
        r = items.perform_operation("passkey", id_or_name=vault.id, type="register_passkey", browser_id=sid)
        assert (r.type, r.status) == ("register_passkey", "armed")
        credential_id = client.browsers.playwright.execute(sid, code="return await page.evaluate(() => register());")
        assert credential_id.success, credential_id
        # The registration lands in the vault: the pending item becomes ready (the long-poll returns).
        ready = items.retrieve("passkey", id_or_name=vault.id, wait=20)
        assert ready.state.status == "ready" and ready.state.fields["passkey"].has_value, ready.state
        assert ready.state.fields["passkey"].value is None  # sensitive: never shown
        assert ops(ready) == {"fill", "webmcp_invoke", "collect", "arm_passkey", "disarm_passkey"}
        registered = [e for e in items.events("passkey", id_or_name=vault.id) if e.name == "credential_passkey_registered"]
        assert len(registered) == 1 and registered[0].data == {"field": "passkey", "rp_id": "localhost"}
        assert registered[0].browser_id == sid

        # Disarmed, the browser has no authenticator: the page's sign-in fails.
        r = items.perform_operation("passkey", id_or_name=vault.id, type="disarm_passkey", browser_id=sid)
        assert (r.type, r.status) == ("disarm_passkey", "disarmed")
        goto(client, sid, url)
        assert "id" not in page_eval(client, sid, "signIn()")
        goto(client, sid, url)  # ends the request still waiting for a key
        # Armed from the vault's sealed copy, the same passkey signs the page in, on every tab: one
        # open when it was armed and one opened after.
        tab2, tab3 = f"{url}?tab=2", f"{url}?tab=3"
        open_tab(client, sid, tab2)
        r = items.perform_operation("passkey", id_or_name=vault.id, type="arm_passkey", browser_id=sid)
        assert (r.type, r.status, r.rp_id) == ("arm_passkey", "armed", "localhost")
        signed_in = {"id": credential_id.result, "user": "user-ada", "signed": True}
        got = page_eval(client, sid, "signIn()")
        assert got == signed_in, got
        assert tab_eval(client, sid, tab2, "signIn()") == signed_in
        open_tab(client, sid, tab3)
        assert tab_eval(client, sid, tab3, "signIn()") == signed_in
        # Disarmed, no tab signs in any more.
        items.perform_operation("passkey", id_or_name=vault.id, type="disarm_passkey", browser_id=sid)
        goto(client, sid, url)
        assert "id" not in page_eval(client, sid, "signIn()")
        for tab in (tab2, tab3):
            assert "id" not in tab_eval(client, sid, tab, "signIn()", reload=True)
    finally:
        client.browsers.delete_by_id(b.session_id)
        items.delete("passkey", id_or_name=vault.id)


class _Connect(http.server.BaseHTTPRequestHandler):
    """TEST DOUBLE, not 1Password: the three GETs of 1Password Connect's REST API that Hangar's
    credential providers make (as tests/e2e/lib/connect-double.mjs answers them), because no real
    Connect server can run on these machines. One vault with one login item for localhost."""

    VAULT = {"id": "vlt-team", "name": "Team"}
    ITEM = {"id": "itm-shop", "title": "Shop", "category": "LOGIN",
            "urls": [{"href": "http://localhost/login", "primary": True}],
            "fields": [{"id": "username", "type": "STRING", "purpose": "USERNAME", "label": "username",
                        "value": "ada@example.com"},
                       {"id": "password", "type": "CONCEALED", "purpose": "PASSWORD", "label": "password",
                        "value": CONNECT_PASSWORD}]}

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        summary = {k: v for k, v in self.ITEM.items() if k != "fields"} | {"vault": {"id": self.VAULT["id"]}}
        if self.headers.get("Authorization") != f"Bearer {CONNECT_TOKEN}":
            self._reply(401, {"status": 401, "message": "Invalid token"})
        elif parts == ["v1", "vaults"]:
            self._reply(200, [self.VAULT | {"type": "USER_CREATED", "items": 1}])
        elif parts == ["v1", "vaults", self.VAULT["id"], "items"]:
            self._reply(200, [summary])
        elif parts == ["v1", "vaults", self.VAULT["id"], "items", self.ITEM["id"]]:
            self._reply(200, self.ITEM | {"vault": {"id": self.VAULT["id"]}})
        else:
            self._reply(404, {"status": 404, "message": "Not found"})

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        reply(self, status, data, "application/json")

    def log_message(self, *args: object) -> None:
        pass


def test_a_managed_auth_item_fills_a_1password_login_through_the_connect_server(origin: str) -> None:
    """Issue 48: a vault item that references a 1Password item through the organisation's Connect
    server (an auth connection whose credential is that provider's item) fills it into a page."""
    with serving(_Connect, range(ALLOWED_PORTS[0] + 140, ALLOWED_PORTS[0] + 160)) as port, \
            launched({"HANGAR_FETCH_ALLOW": f"127.0.0.1:{port}"}) as srv:
        c = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=120, max_retries=0)
        c.credential_providers.create(name="team-1password", provider_type="onepassword", token=CONNECT_TOKEN,
                                      extra_body={"url": f"http://127.0.0.1:{port}"})
        conn = c.auth.connections.create(domain="localhost", profile_name="py-op-profile",
                                         credential={"provider": "team-1password", "path": "Team/Shop"})
        v = c.vaults.upsert(name="py-op-vault")
        item = c.vaults.items.upsert("shop", id_or_name=v.id, type="credential",
                                     spec={"provider": "managed_auth", "connection_id": conn.id})
        assert (item.state.status, ops(item)) == ("ready", {"fill"})
        assert CONNECT_PASSWORD not in item.model_dump_json()
        b = c.browsers.create(headless=True, timeout_seconds=300, vaults=[{"id": v.id}])
        try:
            url = f"{origin}/login"
            goto(c, b.session_id, url)
            r = c.vaults.items.perform_operation("shop", id_or_name=v.id, type="fill", browser_id=b.session_id,
                                                 page_url=url)
            assert r.status == "completed", r
            assert CONNECT_PASSWORD not in r.model_dump_json()
            seen = page_eval(c, b.session_id, "[document.getElementById('email').value, "
                                              "document.getElementById('pass').value]")
            assert seen == ["ada@example.com", CONNECT_PASSWORD]
        finally:
            c.browsers.delete_by_id(b.session_id)
        out = srv.output()
        assert CONNECT_PASSWORD not in out and CONNECT_TOKEN not in out


def test_no_secret_value_in_the_servers_output(server) -> None:
    """Runs last in the module: everything above stored, filled and invoked these values."""
    out = server.output()
    assert out, "the server printed nothing"
    for value in (PASSWORD, OTHER_PASSWORD, TOTP_SEED, MCP_PASSWORD, MA_PASSWORD, CLIENT_SECRET, LINK_ACCESS):
        assert value not in out
    # The passkeys registered and armed (every tab, pool releases) are made by Chromium, so the
    # test does not know them: no CDP credential (its `privateKey` member) is ever printed.
    assert "privateKey" not in out
