"""Finding and describing the user's credential (``hepvine.reading.credentials``): the proxy and token discovery
orders, a proxy's identity, VO and time left (its chain's and its VOMS attributes'), a token's claims, and the check
before the first job, in a campaign's dry run. Certificates and tokens are made here: their signatures are not what
is tested (that is the storage's job; the sandbox's XRootD servers do not ask for credentials yet, issue 32 item 5)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hepvine.reading import credentials
from hepvine.reading.credentials import CredentialError
from hepvine.routing import site

REPO = Path(__file__).resolve().parents[2]

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.timezone.utc)


def der(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = (
        bytes([n])
        if n < 0x80
        else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    )
    return bytes([tag]) + length + content


def voms_ac(fqans: list[str], not_after: dt.datetime, now: dt.datetime = NOW) -> bytes:
    """The shape of VOMS's AC sequence extension: SEQUENCE { AC { acinfo { ..., validity, attributes }, ... } }."""
    validity = der(0x30, b"".join(der(0x18, t.strftime("%Y%m%d%H%M%SZ").encode()) for t in (now, not_after)))
    values = der(0x30, b"".join(der(0x04, f.encode()) for f in fqans))
    attribute = der(0x30, der(0x06, b"\x2b\x06\x01\x04\x01\xbe\x45\x64\x64\x04") + der(0x31, der(0x30, values)))
    acinfo = der(0x30, der(0x02, b"\x01") + validity + der(0x30, attribute))
    return der(0x30, der(0x30, acinfo))


def name(*cns: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "org"), x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example")]
        + [x509.NameAttribute(NameOID.COMMON_NAME, cn) for cn in cns]
    )


def proxy_pem(
    hours: float, ac_hours: float | None = None, fqans=("/cms/Role=NULL/Capability=NULL",), now: dt.datetime = NOW
) -> bytes:
    """A user certificate valid for a year and a proxy of it valid for HOURS (with a VOMS AC valid AC_HOURS) from
    NOW."""
    user_key, proxy_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    user = (
        x509.CertificateBuilder()
        .subject_name(name("Jane Doe"))
        .issuer_name(name("Test CA"))
        .public_key(user_key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .sign(user_key, hashes.SHA256())
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name("Jane Doe", "12345"))
        .issuer_name(user.subject)
        .public_key(proxy_key.public_key())
        .serial_number(12345)
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=hours))
        .add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier(credentials.PROXY_CERT_INFO), b"\x30\x00"), True
        )
    )
    if ac_hours is not None:
        ac = voms_ac(list(fqans), now + dt.timedelta(hours=ac_hours), now)
        builder = builder.add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier(credentials.VOMS_AC), ac), False
        )
    proxy = builder.sign(user_key, hashes.SHA256())
    key = proxy_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    return proxy.public_bytes(serialization.Encoding.PEM) + key + user.public_bytes(serialization.Encoding.PEM)


def jwt(claims: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'ES256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def test_the_proxy_is_found_where_voms_proxy_init_puts_it(tmp_path, monkeypatch):
    assert credentials.proxy_location({"X509_USER_PROXY": "/x/p"}, 1000) == (
        tmp_path.parent / "/x/p",
        "$X509_USER_PROXY",
    )
    assert credentials.proxy_location({}, 1000) == (Path("/tmp/x509up_u1000"), "/tmp/x509up_u1000")


def test_the_token_is_found_in_the_wlcg_discovery_order(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir()
    assert credentials.token_location({"BEARER_TOKEN": "abc", "BEARER_TOKEN_FILE": "/f"}, 7) == (None, "$BEARER_TOKEN")
    assert credentials.token_location({"BEARER_TOKEN": " ", "BEARER_TOKEN_FILE": "/f"}, 7)[1] == "$BEARER_TOKEN_FILE"
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    assert credentials.token_location(env, 7) == (Path("/tmp/bt_u7"), "/tmp/bt_u7")  # none there yet
    (runtime / "bt_u7").write_text("t")
    assert credentials.token_location(env, 7) == (runtime / "bt_u7", "$XDG_RUNTIME_DIR/bt_u<uid>")


def test_a_proxy_is_described_without_its_secret(tmp_path):
    path = tmp_path / "x509up"
    path.write_bytes(proxy_pem(hours=12, ac_hours=11))
    cred = credentials.find("x509", {"X509_USER_PROXY": str(path)}, 1000)
    now = NOW.timestamp()
    assert cred.subject == "/DC=org/DC=example/CN=Jane Doe" and cred.authority == "cms"
    assert cred.attributes == ("/cms/Role=NULL/Capability=NULL",)
    assert cred.time_left_s(now) == pytest.approx(11 * 3600)  # the AC's end, before the proxy's
    text = cred.describe(now)
    assert text == (
        f"X.509 proxy $X509_USER_PROXY = {path}: /DC=org/DC=example/CN=Jane Doe (VO cms, "
        "/cms/Role=NULL/Capability=NULL), 11 h 00 min left"
    )
    assert "PRIVATE" not in json.dumps(cred.provenance(now)) and cred.provenance(now)["time_left_s"] == 39600
    assert credentials.check(cred, needed_s=3600, margin_s=3600, now=now) == [
        f"{text}: its VOMS attributes expire before the proxy"
    ]


def test_a_proxy_without_voms_has_its_chains_time(tmp_path):
    path = tmp_path / "x509up_u1000"
    path.write_bytes(proxy_pem(hours=2))
    cred = credentials.find("x509", {"X509_USER_PROXY": str(path)}, 1000)
    assert cred.authority == "" and cred.time_left_s(NOW.timestamp()) == pytest.approx(7200)
    assert "(VO none)" in cred.describe(NOW.timestamp())


def test_a_token_is_described_from_its_claims(tmp_path):
    exp = NOW.timestamp() + 1800
    token = jwt({"sub": "jdoe", "iss": "https://issuer.example", "scope": "storage.read:/store", "exp": exp})
    (tmp_path / "bt").write_text(token + "\n")
    cred = credentials.find("token", {"BEARER_TOKEN_FILE": str(tmp_path / "bt")}, 1000)
    assert (cred.subject, cred.authority, cred.attributes) == (
        "jdoe",
        "https://issuer.example",
        ("storage.read:/store",),
    )
    assert cred.describe(NOW.timestamp()) == (
        f"bearer token $BEARER_TOKEN_FILE = {tmp_path / 'bt'}: jdoe (issuer https://issuer.example, "
        "storage.read:/store), 30 min left"
    )
    assert token not in cred.describe(NOW.timestamp()) and token not in json.dumps(cred.provenance())
    assert credentials.find("token", {"BEARER_TOKEN": token}, 1000).source == "$BEARER_TOKEN"


@pytest.mark.parametrize(
    ("kind", "content", "words"),
    [
        ("x509", None, "there is none at"),
        ("x509", b"garbage", "holds no certificate"),
        ("token", "not-a-jwt", "not a bearer token"),
        ("token", jwt({"sub": "x"}), "no expiry"),
    ],
)
def test_a_missing_or_unreadable_credential_says_how_to_make_one(tmp_path, kind, content, words):
    path = tmp_path / "cred"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    env = {"X509_USER_PROXY": str(path), "BEARER_TOKEN_FILE": str(path)}
    with pytest.raises(CredentialError, match=words) as e:
        credentials.find(kind, env, 1000)
    assert str(path) in str(e.value)
    if words in ("there is none at", "not a bearer token", "no expiry"):
        assert credentials.RENEW[kind] in str(e.value)


def test_the_check_refuses_an_expired_or_too_short_credential_naming_the_renewal(tmp_path):
    path = tmp_path / "x509up"
    path.write_bytes(proxy_pem(hours=2))
    cred = credentials.find("x509", {"X509_USER_PROXY": str(path)}, 1000)
    now = NOW.timestamp()
    with pytest.raises(CredentialError, match=r"expected to need 90 min more .* voms-proxy-init -voms"):
        credentials.check(cred, needed_s=5400, margin_s=3600, now=now)
    assert credentials.check(cred, needed_s=1800, margin_s=3600, now=now) == []
    with pytest.raises(CredentialError, match=r"EXPIRED 60 min ago: renew it before the campaign starts"):
        credentials.check(cred, needed_s=None, margin_s=0, now=now + 3 * 3600)
    (warning,) = credentials.check(cred, needed_s=None, margin_s=3 * 3600, now=now)
    assert "length is not known yet" in warning
    # A first run's length as a model estimates it only warns: 2 h left, about 90 min planned, 1 h to spare.
    (warning,) = credentials.check(cred, needed_s=None, margin_s=3600, now=now, planned=(5400, "the model's words"))
    assert "estimated to need about 90 min (the model's words)" in warning and "voms-proxy-init -voms" in warning
    assert credentials.check(cred, needed_s=None, margin_s=3600, now=now, planned=(1800, "-")) == []
    assert credentials.check(None, needed_s=10**6, margin_s=0) == []
    with pytest.raises(CredentialError, match="not one of none, x509, token"):
        credentials.find("kerberos")


@pytest.fixture
def campaign_dir():
    """A fresh campaign name under the checkout's results/ (site configs are read from the checkout); removed after."""
    tag = f"test-cred-{uuid.uuid4().hex[:8]}"
    (REPO / "results" / tag).mkdir(parents=True)
    yield tag
    for path in (REPO / "results").glob(f"{tag}*"):
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.pool
def test_a_site_that_asks_for_a_proxy_is_checked_before_the_first_job(campaign_dir):
    """Dry runs of a small campaign on a site whose storage asks for an X.509 proxy: without one the run stops
    before planning any job, naming the renewal command; with one it says whose it is and how long it has left, and
    records that (never the proxy) in the run's provenance."""
    tag = campaign_dir
    site_file = REPO / "results" / tag / "site.yaml"
    site_file.write_text((REPO / "site-configs" / "uchicago-af.yaml").read_text() + "credentials: x509\n")
    origin = site.load(site_file).origins[0]["url"].rstrip("/")
    files = [{"path": f"{origin}//store/cred/f{i}.root", "nevts": 1000} for i in range(3)]
    spec = {"ttbar": {"xsec": 1.0, "nominal": {"nevts_total": 3000, "files": files}}}
    (REPO / "results" / tag / "spec.json").write_text(json.dumps(spec))
    proxy = REPO / "results" / tag / "x509up"
    env = {k: v for k, v in os.environ.items() if k not in ("X509_USER_PROXY",)}

    def dry_run(proxy_path: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config", f"dataset=results/{tag}/spec.json"]
            + [f"site=results/{tag}/site.yaml", f"campaign={tag}-run"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**env, "X509_USER_PROXY": str(proxy_path)},
            timeout=300,
        )

    missing = dry_run(proxy)
    said = missing.stdout + missing.stderr
    assert missing.returncode != 0
    assert f"there is none at {proxy} ($X509_USER_PROXY)" in said, said[-2000:]
    assert "voms-proxy-init -voms" in said and "no job was run" in said
    assert not (REPO / "results" / f"{tag}-run" / "index" / "expected.json").exists()

    proxy.write_bytes(proxy_pem(hours=12, ac_hours=12, now=dt.datetime.now(dt.timezone.utc)))
    proxy.chmod(0o600)
    done = dry_run(proxy)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hepvine: reading with X.509 proxy $X509_USER_PROXY = " in done.stderr
    assert "/DC=org/DC=example/CN=Jane Doe (VO cms, /cms/Role=NULL/Capability=NULL), 11 h" in done.stderr
    run = (REPO / "results" / f"{tag}-run" / "index" / "run.json").read_text()
    assert json.loads(run)["credential"]["subject"] == "/DC=org/DC=example/CN=Jane Doe"
    for block in credentials.PEM_CERTIFICATE.findall(proxy.read_bytes()):
        assert block.decode().splitlines()[1] not in run + done.stderr  # no line of the proxy anywhere
    assert "estimated to need" not in done.stderr  # 3,000 events: minutes at most

    # A first run that hepvine plan's model says would outlast the proxy (3 x 10^14 events: days on the site's 2,504
    # cores at the per-core rate) is warned of, with the estimate and how it was made, and still runs.
    for f in files:
        f["nevts"] = 10**14
    spec["ttbar"]["nominal"]["nevts_total"] = 3 * 10**14
    (REPO / "results" / tag / "spec.json").write_text(json.dumps(spec))
    long = dry_run(proxy)
    assert long.returncode == 0, long.stderr[-3000:]
    assert "a first run of this campaign is estimated to need about" in long.stderr, long.stderr[-3000:]
    assert "3 files" in long.stderr and "hepvine plan's model" in long.stderr and "voms-proxy-init" in long.stderr


def test_a_token_given_as_a_value_becomes_a_private_file(monkeypatch):
    token = jwt({"sub": "jdoe", "iss": "https://issuer.example", "exp": NOW.timestamp() + 3600})
    monkeypatch.setenv("BEARER_TOKEN", token)
    cred = credentials.find("token")
    path = credentials.as_file(cred)
    assert path.read_text() == token + "\n" and path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert credentials.VARIABLE[cred.kind] == "BEARER_TOKEN_FILE"
