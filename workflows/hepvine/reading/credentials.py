"""The user's credential for XRootD reads: an X.509 proxy or a WLCG bearer token, found where the user's own tools
find them, described (whose, which VO or issuer, how long it has left; never the secret itself), and checked against
how long the campaign will run.

- Proxy: ``$X509_USER_PROXY``, else ``/tmp/x509up_u<uid>`` (what ``voms-proxy-init`` and ``xrdgsiproxy`` write).
- Token: the WLCG Bearer Token Discovery order: ``$BEARER_TOKEN`` (the token itself), ``$BEARER_TOKEN_FILE``,
  ``$XDG_RUNTIME_DIR/bt_u<uid>``, ``/tmp/bt_u<uid>`` (what ``htgettoken`` and ``oidc-token`` write).

A proxy's time left is the least of its chain's certificates' and of its VOMS attribute certificate's (the
``voms-proxy-info --timeleft`` and ``--acleft`` of the VOMS tools); a token's is its ``exp`` claim. Nothing here
verifies a signature: the storage does that (the sandbox's XRootD servers in the tests).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from hepvine.model.limits import duration
from snakemake_executor_plugin_taskvine.credentials import der_leaves

KINDS = ("none", "x509", "token")
# RFC 3820's proxyCertInfo and VOMS's attribute certificate extension.
PROXY_CERT_INFO = "1.3.6.1.5.5.7.1.14"
VOMS_AC = "1.3.6.1.4.1.8005.100.100.5"
PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
# The variable that names the file of each kind, for the tasks and every XRootD client (GSI; ztn for tokens).
VARIABLE = {"x509": "X509_USER_PROXY", "token": "BEARER_TOKEN_FILE"}
# The renewal commands a user at a WLCG site runs, by kind.
RENEW = {
    "x509": "voms-proxy-init -voms <your VO> -valid 96:00 (or: xrdgsiproxy init -valid 96:00 without a VO)",
    "token": "htgettoken -a <vault server> -i <issuer> (or: oidc-token <account> > $BEARER_TOKEN_FILE)",
}


class CredentialError(ValueError):
    """A credential that is missing, unreadable, expired or too short for the campaign: says which and how to
    renew it."""


@dataclass(frozen=True)
class Credential:
    """A credential found for KIND: where (PATH, or None for a token in ``$BEARER_TOKEN``), how it was found
    (SOURCE), whose (SUBJECT: the proxy's identity without its proxy CNs, or the token's ``sub``), the VO or the
    token's issuer (AUTHORITY), its FQANs or scopes (ATTRIBUTES), and NOT_AFTER (seconds since the epoch; for a
    proxy, the sooner of its certificates' end, CERTIFICATES_NOT_AFTER, and its VOMS attributes')."""

    kind: str
    path: Path | None
    source: str
    subject: str
    authority: str
    attributes: tuple[str, ...] = ()
    not_after: float = 0.0
    notes: tuple[str, ...] = field(default=())
    certificates_not_after: float = 0.0

    def time_left_s(self, now: float | None = None) -> float:
        return self.not_after - (time.time() if now is None else now)

    def describe(self, now: float | None = None) -> str:
        """One line for the run's first lines and its provenance: never the credential itself."""
        what = "X.509 proxy" if self.kind == "x509" else "bearer token"
        where = self.source if self.path is None or self.source == str(self.path) else f"{self.source} = {self.path}"
        label = "VO" if self.kind == "x509" else "issuer"
        left = self.time_left_s(now)
        status = f"{duration(left)} left" if left > 0 else f"EXPIRED {duration(-left)} ago"
        attributes = f", {' '.join(self.attributes)}" if self.attributes else ""
        return f"{what} {where}: {self.subject} ({label} {self.authority or 'none'}{attributes}), {status}"

    def provenance(self, now: float | None = None) -> dict:
        return {
            "kind": self.kind,
            "source": self.source,
            "subject": self.subject,
            "authority": self.authority,
            "attributes": list(self.attributes),
            "not_after": datetime.fromtimestamp(self.not_after, timezone.utc).isoformat(timespec="seconds"),
            "time_left_s": round(self.time_left_s(now)),
        }


# --- discovery ---------------------------------------------------------------------------------------------------


def proxy_location(environ: dict[str, str], uid: int) -> tuple[Path, str]:
    """(where the proxy is, how that was decided), as the Globus and VOMS tools decide it."""
    if environ.get("X509_USER_PROXY"):
        return Path(environ["X509_USER_PROXY"]), "$X509_USER_PROXY"
    path = Path(f"/tmp/x509up_u{uid}")
    return path, str(path)


def token_location(environ: dict[str, str], uid: int) -> tuple[Path | None, str]:
    """(the file holding the token, or None when ``$BEARER_TOKEN`` holds it; how that was decided): the WLCG
    Bearer Token Discovery order."""
    if environ.get("BEARER_TOKEN", "").strip():
        return None, "$BEARER_TOKEN"
    if environ.get("BEARER_TOKEN_FILE"):
        return Path(environ["BEARER_TOKEN_FILE"]), "$BEARER_TOKEN_FILE"
    if environ.get("XDG_RUNTIME_DIR"):
        path = Path(environ["XDG_RUNTIME_DIR"]) / f"bt_u{uid}"
        if path.exists():
            return path, "$XDG_RUNTIME_DIR/bt_u<uid>"
    path = Path(f"/tmp/bt_u{uid}")
    return path, str(path)


def find(kind: str, environ: dict[str, str] | None = None, uid: int | None = None) -> Credential | None:
    """The credential of KIND (``x509``, ``token``; None for ``none``), found and read; CredentialError when there
    is none where the user's tools would have put it, or it cannot be read."""
    if kind not in KINDS:
        raise CredentialError(f"credentials: {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "none":
        return None
    environ = dict(os.environ if environ is None else environ)
    uid = os.getuid() if uid is None else uid
    if kind == "x509":
        path, source = proxy_location(environ, uid)
        return read_proxy(_read(path, source, kind), path, source)
    path, source = token_location(environ, uid)
    text = environ["BEARER_TOKEN"] if path is None else _read(path, source, kind).decode(errors="replace")
    return read_token(text, path, source)


def vetted_proxy(path: Path, source: str) -> str:
    """The X.509 proxy at PATH (found by SOURCE) described in one line, for a service other than the storage that
    authenticates the user by its certificates alone (Rucio maps the DN; its VOMS attributes do not count);
    CredentialError naming the renewal when it is missing, unreadable, or its certificates have expired."""
    credential = read_proxy(_read(path, source, "x509"), path, source)
    if credential.certificates_not_after <= time.time():
        raise CredentialError(
            f"{credential.describe()}: its certificates have expired; make a new one: {RENEW['x509']}"
        )
    return credential.describe()


def _read(path: Path, source: str, kind: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CredentialError(
            f"an {'X.509 proxy' if kind == 'x509' else 'bearer token'} is needed and there is none at {path} "
            f"({source}); make one: {RENEW[kind]}"
        ) from None
    except OSError as e:
        raise CredentialError(f"cannot read the credential at {path} ({source}): {e.strerror}") from None


def as_file(credential: Credential) -> Path:
    """The file holding CREDENTIAL: its own, or for a token given as ``$BEARER_TOKEN``'s value, a file of the user's
    (mode 0600, in a fresh directory only the user may enter) that is removed when this process ends."""
    if credential.path is not None:
        return credential.path.absolute()
    import atexit
    import shutil
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="hepvine-token-"))
    atexit.register(shutil.rmtree, directory, True)
    path = directory / "bearer-token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.environ["BEARER_TOKEN"].strip() + "\n")
    return path


# --- reading -----------------------------------------------------------------------------------------------------


def read_proxy(pem: bytes, path: Path | None, source: str) -> Credential:
    """An X.509 proxy file (its certificate, its key, the chain up to the user's certificate), described."""
    from cryptography import x509

    try:
        chain = [x509.load_pem_x509_certificate(block) for block in PEM_CERTIFICATE.findall(pem)]
    except ValueError as e:
        raise CredentialError(f"{path} ({source}) is not an X.509 proxy: {e}") from None
    if not chain:
        raise CredentialError(f"{path} ({source}) holds no certificate: is it an X.509 proxy? {RENEW['x509']}")
    not_after = chain_end = min(c.not_valid_after_utc.timestamp() for c in chain)
    identity = next((c for c in chain if not _is_proxy(c)), chain[-1])
    vo, fqans, notes = "", (), ()
    for cert in chain:
        try:
            ac = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(VOMS_AC)).value.value
        except x509.ExtensionNotFound:
            continue
        ac_end, fqans = voms_attributes(ac)
        if fqans:
            vo = fqans[0].strip("/").split("/")[0]
        if ac_end is not None and ac_end < not_after:
            not_after, notes = ac_end, ("its VOMS attributes expire before the proxy",)
        break
    return Credential("x509", path, source, _dn(identity), vo, tuple(fqans), not_after, notes, chain_end)


def _is_proxy(cert) -> bool:
    from cryptography import x509

    try:
        cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(PROXY_CERT_INFO))
        return True
    except x509.ExtensionNotFound:
        pass
    last = cert.subject.rdns[-1].rfc4514_string() if cert.subject.rdns else ""
    return cert.subject != cert.issuer and last in ("CN=proxy", "CN=limited proxy")


def _dn(cert) -> str:
    """The subject in the slash form grid tools print (/DC=org/DC=example/CN=Jane Doe)."""
    return "".join(f"/{rdn.rfc4514_string()}" for rdn in cert.subject.rdns)


def voms_attributes(der: bytes) -> tuple[float | None, tuple[str, ...]]:
    """(the end of the attribute certificate's validity, its FQANs) from the DER of VOMS's AC sequence: the first
    pair of GeneralizedTimes is the AC's validity; the FQANs are its octet strings that are paths (``/cms/Role=..``)."""
    times: list[float] = []
    fqans: list[str] = []
    for tag, value in der_leaves(der):
        if tag == 0x18 and len(times) < 2:  # GeneralizedTime
            times.append(
                datetime.strptime(value.decode()[:14], "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc).timestamp()
            )
        elif tag == 0x04 and value.startswith(b"/") and b"\0" not in value:
            fqans.append(value.decode(errors="replace"))
    return (times[1] if len(times) == 2 else None), tuple(dict.fromkeys(fqans))


def read_token(text: str, path: Path | None, source: str) -> Credential:
    """A JWT bearer token (three base64url parts), described from its claims: sub, iss, scope, exp."""
    token = text.strip()
    parts = token.split(".")
    where = source if path is None else f"{path} ({source})"
    if len(parts) != 3:
        raise CredentialError(f"{where} is not a bearer token (a JWT: three parts joined by dots); {RENEW['token']}")
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError) as e:
        raise CredentialError(f"{where}: its claims cannot be read ({e}); {RENEW['token']}") from None
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), (int, float)):
        raise CredentialError(f"{where}: the token has no expiry (exp); {RENEW['token']}")
    scopes = tuple(str(claims.get("scope", "")).split())
    return Credential(
        "token", path, source, str(claims.get("sub", "?")), str(claims.get("iss", "")), scopes, claims["exp"]
    )


# --- the check before the first job ------------------------------------------------------------------------------


def check(
    credential: Credential | None,
    needed_s: float | None,
    margin_s: float,
    now: float | None = None,
    planned: tuple[float, str] | None = None,
) -> list[str]:
    """Warnings about CREDENTIAL for a campaign expected to run NEEDED_S more seconds (None: not known) with
    MARGIN_S to spare; CredentialError when it has expired, or will before the campaign's expected end (plus the
    margin). Without a NEEDED_S (a first run), PLANNED — (seconds, how) as a model estimates them — warns when the
    credential would not last them: an estimate, not a measure, so it never refuses. The words name the file and
    the command that renews it."""
    if credential is None:
        return []
    left = credential.time_left_s(now)
    renew = RENEW[credential.kind]
    if left <= 0:
        raise CredentialError(f"{credential.describe(now)}: renew it before the campaign starts: {renew}")
    if needed_s is not None and left < needed_s + margin_s:
        raise CredentialError(
            f"{credential.describe(now)}, but the campaign is expected to need {duration(needed_s)} more (and "
            f"{duration(margin_s)} to spare): renew it for longer first: {renew}"
        )
    warnings = [f"{credential.describe(now)}: {note}" for note in credential.notes]
    if planned is not None and needed_s is None and left < planned[0] + margin_s:
        warnings.append(
            f"{credential.describe(now)}, but a first run of this campaign is estimated to need about "
            f"{duration(planned[0])} ({planned[1]}), and {duration(margin_s)} to spare: renew it for longer "
            f"to be safe: {renew}"
        )
    elif needed_s is None and left < margin_s:
        warnings.append(
            f"{credential.describe(now)}: less than the {duration(margin_s)} margin, and the campaign's length is not "
            f"known yet; renew it now to be safe: {renew}"
        )
    return warnings
