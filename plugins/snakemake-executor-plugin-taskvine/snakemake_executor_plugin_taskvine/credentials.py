"""When a credential file that tasks carry (``--taskvine-credential-env``) stops being valid: the earliest end of
validity of the X.509 certificates it holds (an X.509 proxy: the proxy's own and its chain's), or the ``exp`` claim
of a JWT bearer token; None for anything else (then nothing is known, and tasks carry it as it is).

Read from the bytes alone, with no crypto library: nothing is verified here (the storage does that); the time is
what the dispatcher needs to stop handing out tasks that would carry an expired credential (dispatcher.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime, timezone

PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)
UTC_TIME, GENERALIZED_TIME = 0x17, 0x18


def expires_at(data: bytes) -> float | None:
    """Seconds since the epoch when the credential DATA stops being valid, or None when that cannot be read."""
    blocks = PEM_CERTIFICATE.findall(data)
    if blocks:
        ends = [certificate_not_after(_unbase64(block)) for block in blocks]
        known = [end for end in ends if end is not None]
        return min(known) if known else None
    return token_exp(data)


def certificate_not_after(der: bytes | None) -> float | None:
    """The notAfter of a DER certificate: the second time value of its tbsCertificate (the validity's; nothing
    before it in a certificate is a time)."""
    if not der:
        return None
    times = [value for tag, value in der_leaves(der) if tag in (UTC_TIME, GENERALIZED_TIME)][:2]
    if len(times) < 2:
        return None
    text = times[1].decode(errors="replace").rstrip("Z")
    try:
        if len(text) == 12:  # UTCTime: YYMMDDHHMMSS, years 50-99 in the 1900s
            year = int(text[:2])
            text = f"{19 if year >= 50 else 20}{text}"
        return datetime.strptime(text[:14], "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def token_exp(data: bytes) -> float | None:
    """The ``exp`` claim of a JWT (header.claims.signature, base64url), or None."""
    parts = data.strip().split(b".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + b"=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, (int, float)) else None


def der_leaves(der: bytes, depth: int = 0):
    """(tag, content) of every primitive value in DER, depth first; constructed values are walked into."""
    i = 0
    while i + 2 <= len(der) and depth < 32:
        tag, length, i = der[i], der[i + 1], i + 2
        if length & 0x80:
            n = length & 0x7F
            length, i = int.from_bytes(der[i : i + n], "big"), i + n
        value, i = der[i : i + length], i + length
        if tag & 0x20:  # constructed
            yield from der_leaves(value, depth + 1)
        else:
            yield tag, value


def _unbase64(block: bytes) -> bytes | None:
    try:
        return base64.b64decode(b"".join(block.split()), validate=True)
    except binascii.Error:
        return None
