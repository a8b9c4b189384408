"""Credentials' TOTP parameters of 0.131 (kernel-api-0131.md §2.5) through the official Python SDK:
the HMAC, the digits and the period, as fields or inside an otpauth:// URI, each code checked
against an RFC 6238 implementation written here from the RFC (hmac + hashlib), not Hangar's."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import time

import pytest

import kernel
from kernel import Kernel

SECRET = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"  # RFC 6238's SHA-1 key, in base32


def rfc6238(secret_b32: str, t: float, algorithm: str = "SHA1", digits: int = 6, period: int = 30) -> str:
    key = base64.b32decode(secret_b32 + "=" * (-len(secret_b32) % 8))
    mac = hmac.new(key, struct.pack(">Q", int(t) // period), getattr(hashlib, algorithm.lower())).digest()
    offset = mac[-1] & 0x0F
    value = struct.unpack(">I", mac[offset:offset + 4])[0] & 0x7FFFFFFF
    return str(value % 10**digits).zfill(digits)


def code_now(client: Kernel, name: str, **params) -> tuple[str, str]:
    """The server's code and the one computed here for the same step (retried across a step edge)."""
    for _ in range(3):
        before = time.time()
        served = client.credentials.totp_code(name).code
        after = time.time()
        step = params.get("period", 30)
        if int(before) // step == int(after) // step:
            return served, rfc6238(SECRET if "secret" not in params else params["secret"], before,
                                   params.get("algorithm", "SHA1"), params.get("digits", 6), step)
    raise AssertionError("three requests straddled a step edge")


def test_totp_parameters_as_fields_and_in_an_otpauth_uri(client: Kernel) -> None:
    made = []
    try:
        c = client.credentials.create(name="totp-fields", domain="totp.test", values={"username": "u"},
                                      totp_secret=SECRET, totp_algorithm="SHA256", totp_digits=8, totp_period=60)
        made.append(c.name)
        assert (c.totp_algorithm, c.totp_digits, c.totp_period) == ("SHA256", 8, 60)
        assert c.totp_code is not None and len(c.totp_code) == 8
        served, expected = code_now(client, "totp-fields", algorithm="SHA256", digits=8, period=60)
        assert served == expected

        # The URI's parameters win over the fields; what it leaves out starts from SHA1/6/30.
        uri = f"otpauth://totp/Shop:ann?secret={SECRET}&issuer=Shop&algorithm=SHA512&digits=7"
        c = client.credentials.create(name="totp-uri", domain="totp.test", values={}, totp_secret=uri, totp_digits=8,
                                      totp_period=45)
        made.append(c.name)
        assert (c.totp_algorithm, c.totp_digits, c.totp_period) == ("SHA512", 7, 45)
        served, expected = code_now(client, "totp-uri", algorithm="SHA512", digits=7, period=45)
        assert served == expected

        # Without parameters: Kernel's defaults, in every answer.
        c = client.credentials.create(name="totp-plain", domain="totp.test", values={}, totp_secret=SECRET)
        made.append(c.name)
        assert (c.totp_algorithm, c.totp_digits, c.totp_period) == ("SHA1", 6, 30)
        listed = {x.name: x for x in client.credentials.list(domain="totp.test")}
        assert (listed["totp-fields"].totp_algorithm, listed["totp-fields"].totp_digits) == ("SHA256", 8)

        # A raw secret rotated keeps the parameters it does not name.
        u = client.credentials.update("totp-fields", totp_secret=SECRET, totp_digits=6)
        assert (u.totp_algorithm, u.totp_digits, u.totp_period) == ("SHA256", 6, 60)
        served, expected = code_now(client, "totp-fields", algorithm="SHA256", digits=6, period=60)
        assert served == expected
        # Removing the secret removes its parameters.
        u = client.credentials.update("totp-fields", totp_secret="")
        assert u.has_totp_secret is False and (u.totp_algorithm, u.totp_digits, u.totp_period) == ("SHA1", 6, 30)
    finally:
        for name in made:
            client.credentials.delete(name)


@pytest.mark.parametrize("fields, named", [
    ({"totp_secret": SECRET, "totp_algorithm": "MD5"}, "totp_algorithm"),
    ({"totp_secret": SECRET, "totp_digits": 9}, "totp_digits"),
    ({"totp_secret": SECRET, "totp_period": 0}, "totp_period"),
    ({"totp_secret": "JBSWY3DPEHPK3PX"}, "totp_secret"),  # 15 characters
    ({"totp_secret": "A" * 129}, "totp_secret"),
    ({"totp_secret": f"otpauth://totp/x?secret={SECRET}&digits=12"}, "totp_secret"),
    ({"totp_secret": f"otpauth://hotp/x?secret={SECRET}&counter=0"}, "totp_secret"),
])
def test_bad_totp_parameters_are_refused_naming_the_field(client: Kernel, fields: dict, named: str) -> None:
    with pytest.raises(kernel.BadRequestError) as refused:
        client.credentials.create(name="totp-bad", domain="totp.test", values={}, **fields)
    assert named in str(refused.value.body), refused.value.body
    with pytest.raises(kernel.NotFoundError):
        client.credentials.retrieve("totp-bad")


def test_parameters_need_a_secret_on_update(client: Kernel) -> None:
    client.credentials.create(name="totp-needs", domain="totp.test", values={}, totp_secret=SECRET)
    try:
        with pytest.raises(kernel.BadRequestError) as refused:
            client.credentials.update("totp-needs", totp_digits=8)
        assert "totp_digits" in str(refused.value.body)
        assert client.credentials.retrieve("totp-needs").totp_digits == 6
    finally:
        client.credentials.delete("totp-needs")
