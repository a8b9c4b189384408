"""Audit-log export to an S3-compatible bucket as the Python SDK 0.131 speaks it (kernel-api-0131.md
§1F), against a real S3-compatible server: moto's server mode (PyPI `moto`, in this venv), read
back with boto3. Destination CRUD with the secret key write-only and sealed at rest, `test` (a
probe written and deleted, and a failure reported by stage), and 500 requests landing in the
bucket exactly once across a restart of the Hangar server that ships them.

moto and not SeaweedFS: moto installs from PyPI in seconds and its server is up in about 1 s
(measured: 1.16 s), and it is the S3 botocore's own tests are written against (bucket-name
rules, SSE headers echoed, ListObjectsV2 paging). SeaweedFS's S3 gateway has no tagged release
on the Go module proxy and a build of hundreds of modules. moto does not check signatures:
Hangar's SigV4 is checked against AWS's published examples in tests/unit/sdk_sigv4_test.cpp.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import boto3
import httpx
import pytest

import kernel
from kernel import Kernel

from conftest import ALLOWED_PORTS, config_dir, launched, postgres, wait_for
from test_0131_export import free_port

KEY_ID, SECRET = "AKIAHANGARTEST000001", "hangar-test-secret-key-never-stored-in-clear"


class Moto:
    def __init__(self, port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: httpx.get(self.url + "/moto-api/", timeout=2).status_code == 200, timeout=30,
                 what="moto's S3 server")

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(15)
            self.proc = None

    def s3(self):
        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                            region_name="us-east-1")


@pytest.fixture(scope="module")
def moto() -> Iterator[Moto]:
    m = Moto(free_port(ALLOWED_PORTS[0] + 100, ALLOWED_PORTS[0] + 119))
    m.start()
    try:
        m.s3().create_bucket(Bucket="hangar-audit")
        yield m
    finally:
        m.stop()


def config(d: str, moto: Moto) -> str:
    return config_dir(d, {"fetch_allow": f"127.0.0.1:{moto.port}"},
                      {"audit_export": "interval_ms = 300\nsettle_ms = 500\nobject_entries = 120"})


def api(srv, method: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.request(method, srv.base_url + path, json=body, timeout=60,
                         headers={"Authorization": f"Bearer {srv.api_key}"})


def raw_of(srv, destination_id: str) -> dict:
    """The destination as the server answers it (Hangar's additions included)."""
    return api(srv, "GET", f"/audit-logs/export/destinations/{destination_id}").json()


def objects(moto: Moto, prefix: str) -> dict[str, bytes]:
    s3 = moto.s3()
    out: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="hangar-audit", Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = s3.get_object(Bucket="hangar-audit", Key=o["Key"])["Body"].read()
    return out


def lines(objs: dict[str, bytes]) -> list[dict]:
    return [json.loads(line) for body in objs.values() for line in gzip.decompress(body).decode().splitlines()]


def test_destinations_crud_and_test(moto: Moto) -> None:
    with tempfile.TemporaryDirectory(prefix="hangar-audit-cfg-") as d, launched({"HANGAR_CONFIG": config(d, moto)}) as srv:
        client = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=60, max_retries=0)
        extra = {"endpoint": moto.url, "access_key_id": KEY_ID, "secret_access_key": SECRET}
        dest = client.audit_logs.export_destinations.create(type="s3", format="jsonl.gz", bucket="hangar-audit",
                                                            prefix="/crud/", region="us-east-1", role_arn="",
                                                            extra_body=extra)
        assert dest.status == "paused" and dest.prefix == "crud" and dest.external_id
        raw = api(srv, "GET", f"/audit-logs/export/destinations/{dest.id}").json()
        assert "secret_access_key" not in raw and raw["has_secret_access_key"] is True, raw
        for path in Path(srv.data_dir).rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
        assert [x.id for x in client.audit_logs.export_destinations.list()] == [dest.id]
        kms = client.audit_logs.export_destinations.create(type="s3", format="jsonl.gz", bucket="hangar-audit-kms",
                                                           prefix="k", region="eu-west-1", role_arn="",
                                                           kms_key_id="arn:aws:kms:eu-west-1:1:key/abc",
                                                           extra_body={**extra, "sse": "aws:kms"})
        try:
            assert kms.kms_key_id == "arn:aws:kms:eu-west-1:1:key/abc" and raw_of(srv, kms.id)["sse"] == "aws:kms"
            page = client.audit_logs.export_destinations.list(limit=1, offset=1)
            assert [x.id for x in page.items] == [kms.id] and not page.has_next_page()
            # Every field changes and reads back; "" removes the KMS key.
            u = client.audit_logs.export_destinations.update(
                kms.id, bucket="hangar-audit-2", prefix="p2/", region="us-west-2", role_arn="arn:aws:iam::1:role/r",
                kms_key_id="", extra_body={"sse": "none", "endpoint": moto.url + "/", "access_key_id": "AKIAOTHER",
                                           "secret_access_key": "other-secret"})
            assert (u.bucket, u.prefix, u.region, u.role_arn, u.kms_key_id) == (
                "hangar-audit-2", "p2", "us-west-2", "arn:aws:iam::1:role/r", None)
            raw = raw_of(srv, kms.id)
            assert (raw["sse"], raw["endpoint"], raw["access_key_id"]) == ("none", moto.url + "/", "AKIAOTHER"), raw
            p = client.audit_logs.export_destinations.update(kms.id, status="active")
            assert p.status == "active" and p.last_exported_cursor
        finally:
            client.audit_logs.export_destinations.delete(kms.id)
        # `test` writes a probe with the destination's settings and removes it.
        t = client.audit_logs.export_destinations.test(dest.id)
        assert t.success is True and t.stage == "complete", t
        assert objects(moto, "crud/") == {}
        # A bucket that does not exist: the stage that failed, and why.
        client.audit_logs.export_destinations.update(dest.id, bucket="no-such-bucket-here")
        t = client.audit_logs.export_destinations.test(dest.id)
        assert t.success is False and t.stage == "put_object" and t.error.code == "put_object_failed", t
        assert "NoSuchBucket" in t.error.message, t
        # A server whose operator set up no role assumption: 501 naming the settings.
        with pytest.raises(kernel.APIStatusError) as e:
            client.audit_logs.export_destinations.create(type="s3", format="jsonl.gz", bucket="hangar-audit",
                                                         prefix="x", region="us-east-1",
                                                         role_arn="arn:aws:iam::123456789012:role/audit")
        assert e.value.status_code == 501 and "assume_role_access_key_id" in str(e.value)
        with pytest.raises(kernel.BadRequestError, match="bucket"):
            client.audit_logs.export_destinations.create(type="s3", format="jsonl.gz", bucket="Bad_Bucket",
                                                         prefix="x", region="us-east-1", role_arn="", extra_body=extra)
        with pytest.raises(kernel.BadRequestError, match="loopback"):
            client.audit_logs.export_destinations.create(
                type="s3", format="jsonl.gz", bucket="hangar-audit", prefix="x", region="us-east-1", role_arn="",
                extra_body={**extra, "endpoint": "http://127.0.0.1:1"})
        client.audit_logs.export_destinations.delete(dest.id)
        with pytest.raises(kernel.NotFoundError):
            client.audit_logs.export_destinations.retrieve(dest.id)


def test_a_destination_without_static_keys_ships_through_an_assumed_role(moto: Moto) -> None:
    """role_arn alone: Hangar asks STS (moto's, on the same server) for the role's keys with its own
    operator keys and the destination's external id, then signs with the temporary keys."""
    role = "arn:aws:iam::123456789012:role/hangar-audit-writer"
    with tempfile.TemporaryDirectory(prefix="hangar-audit-cfg-") as d:
        cfg = config_dir(d, {"fetch_allow": f"127.0.0.1:{moto.port}"}, {"audit_export": (
            "interval_ms = 300\nsettle_ms = 500\nobject_entries = 120\n"
            f"assume_role_access_key_id = AKIAHANGAROPERATOR\nassume_role_secret_access_key = operator-secret\n"
            f"sts_endpoint = {moto.url}\nassume_role_principal_arn = arn:aws:iam::999999999999:role/hangar")})
        with launched({"HANGAR_CONFIG": cfg}) as srv:
            client = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=60, max_retries=0)
            with pytest.raises(kernel.BadRequestError, match="role_arn"):
                client.audit_logs.export_destinations.create(type="s3", format="jsonl.gz", bucket="hangar-audit",
                                                             prefix="r", region="us-east-1", role_arn="not-an-arn",
                                                             extra_body={"endpoint": moto.url})
            dest = client.audit_logs.export_destinations.create(type="s3", format="jsonl.gz", bucket="hangar-audit",
                                                                prefix="role", region="us-east-1", role_arn=role,
                                                                extra_body={"endpoint": moto.url})
            try:
                assert dest.kernel_role_arn == "arn:aws:iam::999999999999:role/hangar"
                assert raw_of(srv, dest.id)["has_secret_access_key"] is False
                t = client.audit_logs.export_destinations.test(dest.id)
                assert t.success is True and t.stage == "complete", t
                assumed = httpx.get(moto.url + "/moto-api/data.json", timeout=10).json()["sts"]["AssumedRole"]
                mine = [a for a in assumed if a["role_arn"] == role]
                assert mine and all(a["external_id"] == dest.external_id for a in mine), assumed
                assert mine[0]["session_name"] == f"hangar-audit-export-{dest.id}"
                client.audit_logs.export_destinations.update(dest.id, status="active")
                for i in range(5):
                    assert api(srv, "GET", f"/profiles/role-{i}").status_code == 404
                wait_for(lambda: any("role-4" in json.dumps(line) for line in lines(objects(moto, "role/"))),
                         timeout=30, what="entries shipped with the role's keys")
                assert client.audit_logs.export_destinations.retrieve(dest.id).consecutive_failures == 0
            finally:
                client.audit_logs.export_destinations.delete(dest.id)


def test_500_requests_land_exactly_once_across_a_restart(moto: Moto) -> None:
    with tempfile.TemporaryDirectory(prefix="hangar-audit-cfg-") as d:
        cfg = config(d, moto)
        data_dir = tempfile.mkdtemp(prefix="hangar-audit-data-")
        key = "sk_test_" + os.urandom(24).hex()
        env = {"HANGAR_CONFIG": cfg, "HANGAR_DATA_DIR": data_dir, "HANGAR_API_KEY": key}
        marker = f"audit-{os.urandom(4).hex()}"
        with launched(env, keep_data=True) as srv:
            client = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=60, max_retries=0)
            dest = client.audit_logs.export_destinations.create(
                type="s3", format="jsonl.gz", bucket="hangar-audit", prefix="runs/" + marker, region="us-east-1",
                role_arn="", extra_body={"endpoint": moto.url, "access_key_id": KEY_ID, "secret_access_key": SECRET})
            # Recorded while paused: never exported.
            assert api(srv, "GET", f"/profiles/{marker}-paused").status_code == 404
            client.audit_logs.export_destinations.update(dest.id, status="active")
            for i in range(250):
                assert api(srv, "GET", f"/profiles/{marker}-{i}").status_code == 404
            # The host writes audit entries off the request thread, so a SIGKILL loses what its
            # writer has not stored yet: the kill below waits until the last of these is stored
            # (what export promises is every stored entry once).
            now = datetime.datetime.now(datetime.timezone.utc)
            window = {"start": now - datetime.timedelta(hours=1), "end": now + datetime.timedelta(hours=1)}
            wait_for(lambda: client.audit_logs.list(**window, search=f"{marker}-249").items, timeout=30,
                     interval=0.05, what="the last entry stored")
            # The server dies (SIGKILL, no clean stop) once objects start to arrive; the next one
            # goes on from the stored cursor (or rewrites the range it had recorded as pending).
            wait_for(lambda: objects(moto, f"runs/{marker}/"), timeout=30, interval=0.05, what="a first object")
            srv.proc.kill()
        with launched(env, keep_data=True) as srv:
            for i in range(250, 500):
                assert api(srv, "GET", f"/profiles/{marker}-{i}").status_code == 404

            def shipped() -> list[dict]:
                got = [e for e in lines(objects(moto, f"runs/{marker}/")) if marker in e["path"]]
                return got if len({e["path"] for e in got}) >= 500 else []

            got = wait_for(shipped, timeout=60, interval=1, what="all 500 entries in the bucket")
            time.sleep(2)  # a duplicate would come with a later object
            got = [e for e in lines(objects(moto, f"runs/{marker}/")) if marker in e["path"]]
            paths = sorted(e["path"] for e in got)
            assert paths == sorted(f"/profiles/{marker}-{i}" for i in range(500)), "each exactly once"
            assert len({e["event_id"] for e in got}) == len(got)
            keys = objects(moto, f"runs/{marker}/").keys()
            for k in keys:
                assert re.fullmatch(rf"runs/{marker}/destination_id={dest.id}/org_id=[^/]+/date=\d{{4}}-\d\d-\d\d/"
                                    r"hour=\d\d/\d{12}-\d{12}\.jsonl\.gz", k), k
            head = moto.s3().head_object(Bucket="hangar-audit", Key=next(iter(keys)))
            assert head["ServerSideEncryption"] == "AES256"
            c = Kernel(api_key=srv.api_key, base_url=srv.base_url, timeout=60, max_retries=0)
            after = c.audit_logs.export_destinations.retrieve(dest.id)
            assert after.status == "active" and after.consecutive_failures == 0 and after.last_exported_cursor
        import shutil
        shutil.rmtree(data_dir, ignore_errors=True)


def node_counter(srv, name: str) -> float:
    text = api(srv, "GET", "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.mark.slow  # ~16 s: a PostgreSQL and two nodes
def test_in_a_cluster_one_node_ships_and_another_takes_over(moto: Moto, tmp_path: Path) -> None:
    """Two nodes on one PostgreSQL (tests/pg/pgtemp.sh): entries recorded by both land once, all
    written by the node holding the lease; SIGKILL that node and the other takes over."""
    key = "sk_test_" + os.urandom(24).hex()
    with postgres(free_port(25400, 25499)) as store:
        with tempfile.TemporaryDirectory(prefix="hangar-audit-cfg-") as d:
            cfg = config_dir(d, {"fetch_allow": f"127.0.0.1:{moto.port}"},
                             {"audit_export": "interval_ms = 300\nsettle_ms = 500\nobject_entries = 100\nlease_ms = 3000"})
            common = {"HANGAR_CONFIG": cfg, "HANGAR_STORE_URL": store, "HANGAR_API_KEY": key,
                      "HANGAR_SECRETS_KEY_FILE": str(tmp_path / "secrets.key"), "HANGAR_NODE_HEARTBEAT_SECONDS": "1"}
            marker = f"cluster-{os.urandom(4).hex()}"
            with launched({**common, "HANGAR_NODE_NAME": "node-a"}) as a, \
                    launched({**common, "HANGAR_NODE_NAME": "node-b"}) as b:
                client = Kernel(api_key=key, base_url=a.base_url, timeout=60, max_retries=0)
                dest = client.audit_logs.export_destinations.create(
                    type="s3", format="jsonl.gz", bucket="hangar-audit", prefix=marker, region="us-east-1",
                    role_arn="", extra_body={"endpoint": moto.url, "access_key_id": KEY_ID, "secret_access_key": SECRET})
                client.audit_logs.export_destinations.update(dest.id, status="active")
                for i in range(200):
                    assert api(a if i % 2 else b, "GET", f"/profiles/{marker}-{i}").status_code == 404

                def shipped(n: int):
                    def check() -> list[dict]:
                        got = [e for e in lines(objects(moto, marker + "/")) if marker in e["path"]]
                        return got if len({e["path"] for e in got}) >= n else []
                    return check

                wait_for(shipped(200), timeout=60, interval=0.5, what="the 200 entries of both nodes")
                by_node = {"a": node_counter(a, "hangar_audit_export_entries_total"),
                           "b": node_counter(b, "hangar_audit_export_entries_total")}
                assert sorted(v > 0 for v in by_node.values()) == [False, True], by_node  # exactly one ships
                holder, other = (a, b) if by_node["a"] else (b, a)
                holder.proc.kill()
                for i in range(200, 300):
                    assert api(other, "GET", f"/profiles/{marker}-{i}").status_code == 404
                got = wait_for(shipped(300), timeout=60, interval=0.5, what="the other node taking over")
                time.sleep(2)
                got = [e for e in lines(objects(moto, marker + "/")) if marker in e["path"]]
                assert sorted(e["path"] for e in got) == sorted(f"/profiles/{marker}-{i}" for i in range(300))
                assert node_counter(other, "hangar_audit_export_entries_total") > 0
