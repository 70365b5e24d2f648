"""Reading with an X.509 proxy, checked by a real XRootD server (issue 32): the sandbox's GSI origin serves the
origin's data only to a valid proxy of a certificate that the sandbox's test CA signed and whose identity its grid
map lists, with VOMS attributes of the sandbox's test VO (XRootD's VOMS plugin verifies them; its authorisation
database admits the VO). Proxies are made as a user makes them (``voms-proxy-fake`` standing for
``voms-proxy-init -voms``; ``xrdgsiproxy init`` for one without a VO), or here (expired, of another CA, or short-lived:
with the attributes of a proxy voms-proxy-fake made).

- xrdcp with the proxy reads; without one, with an expired one, one of another CA or one without VOMS attributes it
  is refused at authentication, and with one of another VO by the authorisation; hepvine reads the real proxy's VO,
  attributes and time left as voms-proxy-info does; the GSI XCaches admit the test VO's proxies only, and read from
  the origin with a service proxy of their own (of the test VO too);
- a campaign on the sandbox-gsi profile and site (HTCondor-provisioned TaskVine workers, reads through the GSI
  caches) completes exactly, every task reading with the proxy TaskVine brought it, though the proxy expired in the
  middle of the run (it was renewed before); the proxy is in no file the campaign wrote; without a proxy the campaign
  stops before its first job, naming the renewal command; without the proxy sent, the run fails, nothing counted;
- a proxy left to expire stops the run (nothing handed out with it; nothing counted failed), and the same command
  finishes the campaign once it is renewed, running only what was left.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import uproot
from credentialed import (
    FILES,
    assert_nowhere,
    assert_read_after_the_end,
    campaign,
    default_credentials_aside,
    report,
    run_across_a_renewal,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from hepvine.devtools import proxies
from hepvine.reading import credentials

pytestmark = [pytest.mark.sandbox, pytest.mark.pool]

REPO = Path(__file__).resolve().parents[2]
NANOAOD = REPO.parent / "shared" / "nanoaod"
# RFC 3820 proxyCertInfo: SEQUENCE { SEQUENCE { id-ppl-inheritAll } }.
PROXY_CERT_INFO = b"\x30\x0c\x30\x0a\x06\x08\x2b\x06\x01\x05\x05\x07\x15\x01"


def proxy(user_cert: bytes, user_key: bytes, out: Path, hours: float, ac: bytes | None = None) -> Path:
    """An RFC 3820 proxy of USER_CERT valid for HOURS (negative: expired that long ago), as voms-proxy-init writes
    one: the proxy's certificate, its key, the user's certificate; mode 0600; with the VOMS attribute certificates AC
    (an extension's value, as in a proxy voms-proxy-fake made of the same certificate) when given."""
    user = x509.load_pem_x509_certificate(user_cert)
    signer = serialization.load_pem_private_key(user_key, None)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.timezone.utc)
    serial = int.from_bytes(os.urandom(4), "big")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([*user.subject, x509.NameAttribute(NameOID.COMMON_NAME, str(serial))]))
        .issuer_name(user.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - dt.timedelta(hours=max(1.0, -hours + 1)))
        .not_valid_after(now + dt.timedelta(hours=hours))
        .add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.5.5.7.1.14"), PROXY_CERT_INFO), True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), True)
    )
    if ac is not None:
        cert = cert.add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier(credentials.VOMS_AC), ac), False)
    cert = cert.sign(signer, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM) + key_pem + user_cert)
    return out


def foreign_user() -> tuple[bytes, bytes]:
    """A certificate with the analysis user's name from a CA the server does not know (self-signed)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name.from_rfc4514_string("CN=Hepvine Analysis User,DC=hepvine-sandbox,DC=org")
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem


@pytest.fixture
def voms_ac(services, tmp_path) -> bytes:
    """The VOMS attribute certificates of the test VO for the test grid's user, valid a day: taken from a proxy that
    voms-proxy-fake made, for this module's own proxies (short-lived, expired) of the same user certificate."""
    made = proxies.make(services["xrootd"]["origin_gsi"]["gsi"], tmp_path / "voms-made", hours=24)
    cert = x509.load_pem_x509_certificate(made.read_bytes())
    return cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(credentials.VOMS_AC)).value.value


@pytest.fixture
def gsi(services, tmp_path):
    """(the GSI origin's services entry, a served file's URL, its events, tag): a real NanoAOD file in a fresh
    directory of the origin's data, which the GSI origin serves too; removed after."""
    origin = services["xrootd"]["origin_gsi"]
    tag = f"test-gsi-{uuid.uuid4().hex[:8]}"
    store = Path(origin["data_dir"]) / "store" / tag
    store.mkdir(parents=True)
    for k in range(4):
        shutil.copy(NANOAOD / "nano_dimuon.root", store / f"dimuon-{k}.root")
    with uproot.open(NANOAOD / "nano_dimuon.root") as f:
        events = f["Events"].num_entries
    yield origin, f"{origin['url']}//store/{tag}", events, tag
    shutil.rmtree(store, ignore_errors=True)
    for path in (REPO / "results").glob(f"{tag}*"):
        shutil.rmtree(path, ignore_errors=True)


def xrdcp(url: str, proxy_file: Path | None, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "X509_USER_PROXY"}
    env["X509_USER_PROXY"] = str(proxy_file or tmp_path / "no-such-proxy")
    return subprocess.run(
        ["xrdcp", "-f", url, str(tmp_path / "copy.root")], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_gsi_origin_reads_only_for_a_valid_proxy_of_its_ca_and_vo(gsi, voms_ac, tmp_path):
    origin, store, _, _ = gsi
    url = f"{store}/dimuon-0.root"
    material = origin["gsi"]
    user_cert, user_key = Path(material["usercert"]).read_bytes(), Path(material["userkey"]).read_bytes()
    # As a user makes one: voms-proxy-init -voms <the VO> (voms-proxy-fake here) from the user certificate and key.
    mine = proxies.make(material, tmp_path / "x509up", hours=1)
    ok = xrdcp(url, mine, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "copy.root").read_bytes() == (NANOAOD / "nano_dimuon.root").read_bytes()
    # hepvine reads what the VOMS tools read in it.
    info = voms_proxy_info(mine, material)
    seen = credentials.read_proxy(mine.read_bytes(), mine, "X509_USER_PROXY")
    assert (seen.authority, seen.attributes) == (info["VO"], (info["attribute"],)), (seen, info)
    assert seen.subject == info["identity"] and abs(seen.time_left_s() - info["timeleft"]) < 60, (seen, info)
    refused = {
        "no proxy": xrdcp(url, None, tmp_path),
        "expired": xrdcp(url, proxy(user_cert, user_key, tmp_path / "expired", hours=-1, ac=voms_ac), tmp_path),
        "another CA": xrdcp(url, proxy(*foreign_user(), tmp_path / "foreign", hours=1), tmp_path),
        "no VO": xrdcp(url, proxy_without_vo(material, tmp_path / "no-vo"), tmp_path),
    }
    for why, done in refused.items():
        assert done.returncode != 0, why
        assert "auth" in done.stderr.lower(), (why, done.stderr)
    other_vo = proxies.make(material, tmp_path / "other-vo", hours=1, vo=material["other_vo"])
    denied = xrdcp(url, other_vo, tmp_path)
    assert denied.returncode != 0 and "permission denied" in denied.stderr, denied.stderr
    assert (
        proxy(user_cert, user_key, tmp_path / "mine", hours=1, ac=voms_ac)
        and xrdcp(url, tmp_path / "mine", tmp_path).returncode == 0
    )


def proxy_without_vo(material: dict, out: Path) -> Path:
    """A proxy of the test grid's user certificate without VOMS attributes, as XRootD's xrdgsiproxy makes one."""
    made = subprocess.run(
        ["xrdgsiproxy", "init", "-cert", material["usercert"], "-key", material["userkey"]]
        + ["-certdir", material["certdir"], "-out", str(out), "-valid", "1:00"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return out


def voms_proxy_info(proxy_file: Path, material: dict) -> dict:
    """What voms-proxy-info -all says of PROXY_FILE: its identity, VO, (first) attribute and time left (seconds)."""
    env = {**os.environ, "X509_VOMS_DIR": material["vomsdir"], "X509_CERT_DIR": material["certdir"]}
    done = subprocess.run(
        ["voms-proxy-info", "-all", "-file", str(proxy_file)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    info = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" : ")
        info.setdefault(key.strip(), value.strip())
    hours, minutes, seconds = info["timeleft"].split(":")
    info["timeleft"] = int(hours) * 3600 + int(minutes) * 60 + int(seconds)
    return info


def test_the_gsi_caches_read_for_a_proxy_and_from_the_origin_as_themselves(services, gsi, tmp_path):
    """Each GSI XCache admits the test VO's proxies only, and fetches what it lacks from the GSI origin with its own
    service proxy: the origin's log shows the cache's identity (mapped by the grid map), not the user's."""
    origin, store, _, tag = gsi
    material = origin["gsi"]
    mine = proxies.make(material, tmp_path / "mine", hours=1)
    refused = {
        "no proxy": None,
        "no VO": proxy_without_vo(material, tmp_path / "no-vo"),
        "another VO": proxies.make(material, tmp_path / "other-vo", hours=1, vo=material["other_vo"]),
    }
    for k, cache in enumerate(services["xrootd"]["caches_gsi"].values()):
        url = f"{cache['url']}//store/{tag}/dimuon-{k}.root"
        read = xrdcp(url, mine, tmp_path)
        assert read.returncode == 0, read.stderr
        assert (tmp_path / "copy.root").read_bytes() == (NANOAOD / "nano_dimuon.root").read_bytes()
        assert (Path(cache["cache_dir"]) / "store" / tag / f"dimuon-{k}.root").exists()  # cached, from the origin
        for why, proxy_file in refused.items():
            assert xrdcp(url, proxy_file, tmp_path).returncode != 0, (why, cache["url"])
    logins = Path(origin["log"]).read_text().splitlines()
    assert any(" login as xrootd" in line for line in logins), logins[-5:]


@pytest.fixture
def gsi_campaign(gsi, services, voms_ac, tmp_path):
    """(tag, the environment without a proxy, a proxy writer, the fileset's events by URL): the GSI fixture's files,
    FILES of them, in a coffea fileset of their logical URLs at the GSI origin; no proxy where XRootD's clients
    would fall back to (default_credentials_aside)."""
    origin, store, events, tag = gsi
    for k in range(4, FILES):
        shutil.copy(NANOAOD / "nano_dimuon.root", Path(origin["data_dir"]) / "store" / tag / f"dimuon-{k}.root")
    urls = {f"{store}/dimuon-{k}.root": events for k in range(FILES)}
    (REPO / "results" / tag).mkdir(parents=True, exist_ok=True)
    (REPO / "results" / tag / "fileset.json").write_text(
        json.dumps({"dimuon": {"files": dict.fromkeys(urls, "Events")}})
    )
    user_cert, user_key = Path(origin["gsi"]["usercert"]).read_bytes(), Path(origin["gsi"]["userkey"]).read_bytes()

    def write_proxy(seconds: float) -> Path:
        """Write the user's proxy file anew (a renewal: a new file put in place), valid for SECONDS from now."""
        fresh = proxy(user_cert, user_key, tmp_path / "x509up.new", hours=seconds / 3600, ac=voms_ac)
        return fresh.replace(tmp_path / "x509up")

    env = {k: v for k, v in os.environ.items() if k != "X509_USER_PROXY"}
    env["X509_USER_PROXY"] = str(tmp_path / "x509up")
    with default_credentials_aside():
        yield tag, env, write_proxy, urls


def test_a_campaign_reads_through_the_gsi_caches_with_the_proxy_renewed_while_it_runs(gsi_campaign, services):
    """The whole path with a proxy: checked before the first job; each task reads through a GSI XCache with the
    proxy TaskVine brought it; the proxy expires in the middle of the run and was renewed before: the tasks handed
    out after its end carry the renewed one (the expired one would be refused by the caches), no file fails, every
    file is counted once; the proxy is in no file the campaign wrote. Without the proxy sent, the caches refuse every
    task: the run fails saying to renew, and nothing is counted."""
    tag, env, write_proxy, urls = gsi_campaign
    missing = campaign("sandbox-gsi", tag, env)
    said = missing.stdout + missing.stderr
    assert missing.returncode != 0 and "voms-proxy-init" in said and "no job was run" in said, said[-2000:]

    written = []

    def write(seconds: float) -> None:
        written.append(write_proxy(seconds).read_bytes().split(b"\n")[1])  # a line of the proxy's certificate

    done, expires = run_across_a_renewal("sandbox-gsi", tag, env, write)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "hepvine: reading with X.509 proxy $X509_USER_PROXY" in done.stderr
    result = report(tag, "run")
    assert result["files"] == {"total": FILES, "ok": FILES, "failed": 0} and result["events"] == sum(urls.values())
    caches = tuple(c["url"] for c in services["xrootd"]["caches_gsi"].values())
    assert all(r["read_from"].startswith(caches) and r["host"] for r in result["inputs"]), result["inputs"][0]
    assert_read_after_the_end(result, expires)
    assert len(written) == 2
    assert_nowhere(tag, done, written)

    unsent = campaign("sandbox-gsi", tag, env, "--taskvine-credential-env", "none", name="unsent")
    said = unsent.stdout + unsent.stderr
    assert unsent.returncode != 0, said[-3000:]
    assert "Auth failed" in said and "refused the credential this job carries" in said and "renew it" in said
    assert not (REPO / "results" / f"{tag}-unsent" / "report.json").exists()
    assert not list((REPO / "results" / f"{tag}-unsent").glob("files/**/*.pkl"))  # nothing counted


def test_a_proxy_that_expires_stops_the_run_and_the_same_command_finishes_it_once_renewed(gsi_campaign):
    """No task is handed out with an expired proxy: the tasks running finish with theirs, the run stops with the
    renewal to make, and nothing is counted failed; renewed, the same command runs only what was left."""
    tag, env, write_proxy, urls = gsi_campaign
    lifetime_s = 40
    write_proxy(lifetime_s)
    expires = time.time() + lifetime_s
    # The first tasks hold their files a few seconds past the end (the dispatcher looks once a second).
    stopped = campaign("sandbox-gsi", tag, env, until=expires + 5)
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0, said[-3000:]
    assert "X509_USER_PROXY" in said and "expired at" in said and "were not run" in said, said[-3000:]
    assert "run the same command again" in said
    kept = list((REPO / "results" / f"{tag}-run").glob("files/**/*.pkl"))
    assert len(kept) < FILES  # those not handed out
    retries = REPO / "results" / f"{tag}-run" / "retries.json"
    assert not retries.exists() or not json.loads(retries.read_text()).get("failures"), retries.read_text()

    write_proxy(7200)
    again = campaign("sandbox-gsi", tag, env, until=expires + 5)
    assert again.returncode == 0, again.stderr[-4000:]
    result = report(tag, "run")
    assert result["files"] == {"total": FILES, "ok": FILES, "failed": 0} and result["events"] == sum(urls.values())
    # Only what was left ran: the batches done before the stop were kept.
    assert again.stderr.count("rule analyse:") == FILES - len(kept), again.stderr[-3000:]
