"""Bearer tokens of the sandbox's own issuer, for tests and the demo: what a user at a site would fetch with
``htgettoken`` or ``oidc-token`` from the VO's issuer, signed here with the issuer key the sandbox's services made
(``services.json``: ``xrootd.origin_token.tokens``), whose public half the token origin serves for scitokens-cpp to
check signatures with. WLCG token profile: ``wlcg.ver`` 1.0, ``storage.read:<path>`` scopes (relative to the
origin's ``/store``), the sandbox's audience.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

from hepvine.model import atomic


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(
    tokens: dict,
    lifetime_s: float,
    scope: str = "storage.read:/",
    key_pem: bytes | None = None,
    subject: str = "hepvine-analysis-user",
) -> str:
    """A token of the sandbox issuer (TOKENS: its services entry) for SUBJECT valid for LIFETIME_S seconds from now
    (negative: expired that long ago), with SCOPE; signed with KEY_PEM instead of the issuer's key when given (a
    forgery)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    now = int(time.time())
    header = {"alg": "ES256", "typ": "JWT", "kid": tokens["key_id"]}
    claims = {
        "iss": tokens["issuer"],
        "sub": subject,
        "aud": tokens["audience"],
        "scope": scope,
        "wlcg.ver": "1.0",
        "iat": now - 60 + min(0, int(lifetime_s)),
        "nbf": now - 60 + min(0, int(lifetime_s)),
        "exp": now + int(lifetime_s),
        "jti": str(uuid.uuid4()),
    }
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    key = serialization.load_pem_private_key(key_pem or Path(tokens["signing_key"]).read_bytes(), None)
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def write(path: Path, token: str) -> Path:
    """TOKEN into PATH, mode 0600, put in place at once (as htgettoken renews a token file)."""
    with atomic.replacing(path) as tmp:
        tmp.chmod(0o600)  # before the token is in it
        tmp.write_text(token + "\n")
    return path
