"""Reading with an X.509 proxy, checked by a real XRootD server (issue 32): the sandbox's GSI origin serves the
origin's data only to a valid proxy of a certificate that the sandbox's test CA signed and whose identity its grid
map lists. Proxies are made as a user makes them (``xrdgsiproxy init``), or here (expired, or of another CA).

- xrdcp with the proxy reads; without one, with an expired one or with one of another CA it is refused by the server;
  the GSI XCaches admit the proxy only, and read from the origin with a service proxy of their own;
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
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import uproot
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
NANOAOD = REPO.parent / "shared" / "nanoaod"
# RFC 3820 proxyCertInfo: SEQUENCE { SEQUENCE { id-ppl-inheritAll } }.
PROXY_CERT_INFO = b"\x30\x0c\x30\x0a\x06\x08\x2b\x06\x01\x05\x05\x07\x15\x01"


def proxy(user_cert: bytes, user_key: bytes, out: Path, hours: float) -> Path:
    """An RFC 3820 proxy of USER_CERT valid for HOURS (negative: expired that long ago), as voms-proxy-init writes
    one: the proxy's certificate, its key, the user's certificate; mode 0600."""
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
        .sign(signer, hashes.SHA256())
    )
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


def test_the_gsi_origin_reads_only_for_a_valid_proxy_of_its_ca(gsi, tmp_path):
    origin, store, _, _ = gsi
    url = f"{store}/dimuon-0.root"
    user_cert, user_key = Path(origin["gsi"]["usercert"]).read_bytes(), Path(origin["gsi"]["userkey"]).read_bytes()
    # As a user makes one: xrdgsiproxy (XRootD's own voms-proxy-init) from the user certificate and key.
    made = subprocess.run(
        ["xrdgsiproxy", "init", "-cert", origin["gsi"]["usercert"], "-key", origin["gsi"]["userkey"]]
        + ["-certdir", origin["gsi"]["certdir"], "-out", str(tmp_path / "x509up"), "-valid", "1:00"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    ok = xrdcp(url, tmp_path / "x509up", tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "copy.root").read_bytes() == (NANOAOD / "nano_dimuon.root").read_bytes()
    refused = {
        "no proxy": xrdcp(url, None, tmp_path),
        "expired": xrdcp(url, proxy(user_cert, user_key, tmp_path / "expired", hours=-1), tmp_path),
        "another CA": xrdcp(url, proxy(*foreign_user(), tmp_path / "foreign", hours=1), tmp_path),
    }
    for why, done in refused.items():
        assert done.returncode != 0, why
        assert "auth" in done.stderr.lower(), (why, done.stderr)
    assert (
        proxy(user_cert, user_key, tmp_path / "mine", hours=1)
        and xrdcp(url, tmp_path / "mine", tmp_path).returncode == 0
    )


def test_the_gsi_caches_read_for_a_proxy_and_from_the_origin_as_themselves(services, gsi, tmp_path):
    """Each GSI XCache admits the user's proxy only, and fetches what it lacks from the GSI origin with its own
    service proxy: the origin's log shows the cache's identity (mapped by the grid map), not the user's."""
    origin, store, _, tag = gsi
    user_cert, user_key = Path(origin["gsi"]["usercert"]).read_bytes(), Path(origin["gsi"]["userkey"]).read_bytes()
    mine = proxy(user_cert, user_key, tmp_path / "mine", hours=1)
    for k, cache in enumerate(services["xrootd"]["caches_gsi"].values()):
        url = f"{cache['url']}//store/{tag}/dimuon-{k}.root"
        assert xrdcp(url, None, tmp_path).returncode != 0, cache["url"]
        read = xrdcp(url, mine, tmp_path)
        assert read.returncode == 0, read.stderr
        assert (tmp_path / "copy.root").read_bytes() == (NANOAOD / "nano_dimuon.root").read_bytes()
        assert (Path(cache["cache_dir"]) / "store" / tag / f"dimuon-{k}.root").exists()  # cached, from the origin
    logins = Path(origin["log"]).read_text().splitlines()
    assert any(" login as xrootd" in line for line in logins), logins[-5:]


# A processor that holds each file until a wall-clock time: with the sandbox's four worker cores busy until then,
# every later task is handed out after it (when the first proxy has expired).
GATED_ANALYSIS = """
import time

from coffea import processor


class Gated(processor.ProcessorABC):
    def __init__(self, until):
        self.until = until

    def process(self, events):
        time.sleep(max(0.0, self.until - time.time()))
        return {"events": len(events), "files": {events.metadata["filename"]: len(events)}}

    def postprocess(self, accumulator):
        return accumulator
"""
FILES = 8


def campaign(tag: str, env: dict, *options: str, name: str = "run", until: float = 0.0) -> subprocess.CompletedProcess:
    """A campaign over the fixture's FILES files on the sandbox-gsi profile and site (HTCondor-provisioned workers;
    every read through a GSI XCache), one file a job, the gated analysis holding each file until UNTIL."""
    inputs = REPO / "results" / tag
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "gated.py").write_text(GATED_ANALYSIS)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "profiles/sandbox-gsi", "--config"]
        + [f"dataset=results/{tag}/fileset.json", "site=site-configs/sandbox-gsi.yaml", f"campaign={tag}-{name}"]
        + [f"analysis=results/{tag}/gated.py:Gated", f"analysis_args={{until: {until}}}", "files_per_job=1"]
        + ["credential_margin_h=0"]
        # The workers get no X509_USER_PROXY of their own (the default list would pass its path on): a task can
        # read only with the proxy TaskVine brings it.
        + ["--taskvine-worker-env", "PATH,LD_LIBRARY_PATH,HOME,USER,LANG,VIRTUAL_ENV,X509_CERT_DIR,CATALOG_*,XRD_*"]
        + list(options),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture
def gsi_campaign(gsi, services, tmp_path):
    """(tag, the environment without a proxy, a proxy writer, the fileset's events by URL): the GSI fixture's files,
    FILES of them, in a coffea fileset of their logical URLs at the GSI origin."""
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
        fresh = proxy(user_cert, user_key, tmp_path / "x509up.new", hours=seconds / 3600)
        return fresh.replace(tmp_path / "x509up")

    env = {k: v for k, v in os.environ.items() if k != "X509_USER_PROXY"}
    env["X509_USER_PROXY"] = str(tmp_path / "x509up")
    return tag, env, write_proxy, urls


def report(tag: str, name: str) -> dict:
    return json.loads((REPO / "results" / f"{tag}-{name}" / "report.json").read_text())


def test_a_campaign_reads_through_the_gsi_caches_with_the_proxy_renewed_while_it_runs(gsi_campaign, services):
    """The whole path with a proxy: checked before the first job; each task reads through a GSI XCache with the
    proxy TaskVine brought it; the proxy expires in the middle of the run and was renewed before: the tasks handed
    out after its end carry the renewed one (the expired one would be refused by the caches), no file fails, every
    file is counted once; the proxy is in no file the campaign wrote. Without the proxy sent, the caches refuse every
    task: the run fails saying to renew, and nothing is counted."""
    tag, env, write_proxy, urls = gsi_campaign
    missing = campaign(tag, env)
    said = missing.stdout + missing.stderr
    assert missing.returncode != 0 and "voms-proxy-init" in said and "no job was run" in said, said[-2000:]

    lifetime_s = 45
    first = write_proxy(lifetime_s)
    expires = time.time() + lifetime_s
    first_secret = first.read_bytes().split(b"\n")[1]
    renewal = threading.Timer(lifetime_s - 20, write_proxy, args=(7200,))
    renewal.start()
    try:
        done = campaign(tag, env, until=expires + 1)
    finally:
        renewal.cancel()
    assert done.returncode == 0, done.stderr[-4000:]
    assert "hepvine: reading with X.509 proxy $X509_USER_PROXY" in done.stderr
    result = report(tag, "run")
    assert result["files"] == {"total": FILES, "ok": FILES, "failed": 0} and result["events"] == sum(urls.values())
    caches = tuple(c["url"] for c in services["xrootd"]["caches_gsi"].values())
    assert all(r["read_from"].startswith(caches) and r["host"] for r in result["inputs"]), result["inputs"][0]
    # Tasks were handed out after the first proxy had expired: they read with the renewed one.
    after = [round(r["start"] - expires, 1) for r in result["inputs"]]
    assert sum(a > 1 for a in after) >= FILES - 4, after
    secrets = [first_secret, (Path(env["X509_USER_PROXY"])).read_bytes().split(b"\n")[1]]
    for root in (REPO / "results" / f"{tag}-run", REPO / ".snakemake"):
        for path in root.rglob("*"):
            if path.is_file() and path.stat().st_size < 50_000_000:
                assert not any(secret in path.read_bytes() for secret in secrets), path
    assert not any(secret.decode() in done.stdout + done.stderr for secret in secrets)

    unsent = campaign(tag, env, "--taskvine-credential-env", "none", name="unsent")
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
    stopped = campaign(tag, env, until=expires + 5)
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0, said[-3000:]
    assert "X509_USER_PROXY" in said and "expired at" in said and "were not run" in said, said[-3000:]
    assert "run the same command again" in said
    kept = list((REPO / "results" / f"{tag}-run").glob("files/**/*.pkl"))
    assert len(kept) < FILES  # those not handed out
    retries = REPO / "results" / f"{tag}-run" / "retries.json"
    assert not retries.exists() or not json.loads(retries.read_text()).get("failures"), retries.read_text()

    write_proxy(7200)
    again = campaign(tag, env, until=expires + 5)
    assert again.returncode == 0, again.stderr[-4000:]
    result = report(tag, "run")
    assert result["files"] == {"total": FILES, "ok": FILES, "failed": 0} and result["events"] == sum(urls.values())
    # Only what was left ran: the batches done before the stop were kept.
    assert again.stderr.count("rule analyse:") == FILES - len(kept), again.stderr[-3000:]
