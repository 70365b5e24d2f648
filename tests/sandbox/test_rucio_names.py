"""Names resolved by the sandbox's real Rucio server (sandbox/catalogue.py), as a campaign's main process resolves
them before any job (dry runs: nothing is read), the user known to Rucio by their X.509 proxy:

- Rucio knows the user by their proxy, as a grid's Rucio does: the server, over HTTPS, verifies the proxy's chain in
  its TLS handshake and maps its DN to the account ``analysis``; a user's rucio.cfg with ``auth_type = x509_proxy``
  is all hepvine needs (``hepvine datasets`` and a campaign's resolution alike). A proxy that has expired is an
  error naming it and the renewal before Rucio is asked (and the server refuses it by itself too); a valid proxy of
  an identity Rucio does not know is refused by the server, and the error names the proxy presented;
- what a DID resolves to is what ``rucio replica list file --pfns`` lists for it, ordered and filtered by the site
  config's preferences (prefer, block, allow, regex); a file left with no replica, or a DID Rucio does not have, is
  an error naming it before any job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rucio.client import Client

from hepvine.devtools import catalogue, proxies

pytestmark = [pytest.mark.sandbox]

REPO = Path(__file__).resolve().parents[2]
# The container's files (catalogue only: nothing is read) and where each has replicas.
PLACED = {"o": (catalogue.ORIGIN,), "b": (catalogue.SITE_B,), "ob": (catalogue.ORIGIN, catalogue.SITE_B)}
FILES = len(PLACED)


@pytest.fixture
def grid(services, tmp_path):
    """(the test grid's material, a user's rucio.cfg that authenticates with $X509_USER_PROXY, the DIDs' pattern
    and the container registered for this test, as the root account: PLACED's files, catalogue only)."""
    tag = f"test-names-{uuid.uuid4().hex[:8]}"
    container = f"/HepvineTest/{tag}/NANOAODSIM"
    files = [
        {"name": f"/store/{tag}/{name}.root", "bytes": 1000 + k, "adler32": f"0000000{k + 1}", "events": 10 + k}
        for k, name in enumerate(PLACED)
    ]
    did = catalogue.register_files(
        Client(), services, container, {f"{container}/block-1": files}, lambda lfn: PLACED[Path(lfn).stem]
    )
    rucio = services["rucio"]
    config = tmp_path / "rucio.cfg"
    config.write_text(
        "[client]\n"
        f"rucio_host = {rucio['url']}\nauth_host = {rucio['url']}\n"
        f"ca_cert = {services['xrootd']['origin_gsi']['gsi']['cafile']}\n"
        f"auth_type = x509_proxy\naccount = {rucio['x509']['account']}\n"
        # The client keeps the server's token for an hour: each test's own, so that a refusal is the server's now.
        f"auth_token_file_path = {tmp_path / 'token' / 'rucio-token'}\n"
    )
    yield services["xrootd"]["origin_gsi"]["gsi"], config, f"cms:/HepvineTest/{tag}*", did
    for path in (REPO / "results").glob(f"{tag}*"):
        shutil.rmtree(path, ignore_errors=True)


def user_env(config: Path, proxy: Path) -> dict[str, str]:
    """A user's environment: their rucio.cfg CONFIG (which names the server's CA: Rucio's client would take
    $X509_CERT_DIR before it) and their PROXY."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUCIO_") and k != "X509_CERT_DIR"}
    return {**env, "RUCIO_CONFIG": str(config), "X509_USER_PROXY": str(proxy)}


def datasets(pattern: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["hepvine", "datasets", pattern, "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def dry_run(did: str, tag: str, env: dict, name: str = "run", replicas: str = "") -> subprocess.CompletedProcess:
    """Campaign TAG-NAME's main process over a fileset naming DID, planned (its DIDs resolved) and not run; on the
    sandbox site, with REPLICAS (YAML) as its replica preferences if given."""
    inputs = REPO / "results" / tag
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "fileset.json").write_text(json.dumps({"block": {"rucio": did}}))
    site = REPO / "site-configs" / "sandbox.yaml"
    if replicas:
        text = site.read_text()
        site = inputs / f"{name}.yaml"
        site.write_text(text.replace("  prefer: [SANDBOX_ORIGIN, SANDBOX_SITE_B]\n", replicas))
        assert site.read_text() != text
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "profiles/sandbox", "-n", "--config"]
        + [f"dataset=results/{tag}/fileset.json", f"site={site}", f"campaign={tag}-{name}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_rucio_knows_the_user_by_their_proxy(grid, tmp_path):
    gsi, config, pattern, did = grid
    proxy = proxies.make(gsi, tmp_path / "x509up", hours=1)
    env = user_env(config, proxy)
    listed = datasets(pattern, env)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["did"] == did and row["files"] == FILES, row

    tag = did.split("/")[2]
    planned = dry_run(did, tag, env)
    assert planned.returncode == 0, planned.stderr[-3000:]
    resolution = json.loads((REPO / "results" / f"{tag}-run" / "rucio" / "resolution.json").read_text())
    assert (resolution["account"], resolution["auth_type"]) == ("analysis", "x509_proxy"), resolution
    assert resolution["dids"][did]["files"] == FILES
    assert proxy.read_bytes() not in (REPO / "results" / f"{tag}-run" / "rucio" / "resolution.json").read_bytes()


def test_an_expired_proxy_is_refused_naming_it_and_the_renewal(services, grid, tmp_path):
    gsi, config, pattern, did = grid
    expired = proxies.make(gsi, tmp_path / "x509up", hours=0)
    env = user_env(config, expired)

    # The server's own check, without hepvine's: its TLS handshake refuses the proxy, and says why in its log.
    log = Path(services["rucio"]["log"])
    seen = log.stat().st_size
    direct = subprocess.run(
        [sys.executable, "-c", "from rucio.client import Client; Client()"], env=env, capture_output=True, text=True
    )
    assert direct.returncode != 0 and "Cannot connect to the Rucio server" in direct.stderr, direct.stderr[-2000:]
    with open(log, "rb") as f:
        f.seek(seen)
        assert b"certificate verify failed: certificate has expired" in f.read()
    assert not (tmp_path / "token").exists() or not any((tmp_path / "token").iterdir())

    # hepvine says what it is and how to renew it, before Rucio is asked.
    listed = datasets(pattern, env)
    assert listed.returncode == 2, listed.stderr
    for words in (str(expired), "EXPIRED", "voms-proxy-init", "auth_type = x509_proxy"):
        assert words in listed.stderr, (words, listed.stderr)
    tag = did.split("/")[2]
    planned = dry_run(did, tag, env)
    said = planned.stdout + planned.stderr
    assert planned.returncode != 0
    for words in (str(expired), "EXPIRED", "voms-proxy-init", "no job was run"):
        assert words in said, (words, said[-3000:])
    assert not (REPO / "results" / f"{tag}-run" / "rucio" / "dataset.json").exists()


def test_a_proxy_of_an_identity_rucio_does_not_know_is_refused_by_the_server(grid, tmp_path):
    gsi, config, pattern, _ = grid
    # A valid proxy of the grid (the VOMS host's certificate, which the sandbox's user may use): not an identity of
    # any Rucio account.
    stranger = proxies.make(gsi, tmp_path / "x509up", hours=1, cert=gsi["vomscert"], key=gsi["vomskey"])
    listed = datasets(pattern, user_env(config, stranger))
    assert listed.returncode == 2, listed.stderr
    for words in ("CannotAuthenticate", f"CN={gsi['voms_host']}", str(stranger)):
        assert words in listed.stderr, (words, listed.stderr)


def resolved(tag: str, name: str) -> dict:
    """{file name: its replicas' URLs, in order} as campaign TAG-NAME resolved them."""
    spec = json.loads((REPO / "results" / f"{tag}-{name}" / "rucio" / "dataset.json").read_text())
    return {Path(f["lfn"]).stem: f["replicas"] for f in spec["block"]["files"].values()}


def test_a_did_resolves_to_what_rucio_lists_ordered_and_filtered_as_the_site_prefers(services, grid, tmp_path):
    gsi, config, _, did = grid
    env = user_env(config, proxies.make(gsi, tmp_path / "x509up", hours=1))
    tag = did.split("/")[2]
    urls = {rse: f"{where['url']}//store/{tag}" for rse, where in catalogue.storage(services).items()}

    # The sandbox site prefers the origin the caches front, then the other site.
    planned = dry_run(did, tag, env)
    assert planned.returncode == 0, planned.stderr[-3000:]
    found = resolved(tag, "run")
    origin, site_b = urls[catalogue.ORIGIN], urls[catalogue.SITE_B]
    assert found == {
        "o": [f"{origin}/o.root"],
        "b": [f"{site_b}/b.root"],
        "ob": [f"{origin}/ob.root", f"{site_b}/ob.root"],
    }
    # What Rucio's own command lists for the DID, as the same user.
    listed = subprocess.run(
        ["rucio", "replica", "list", "file", "--pfns", did],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == sorted(u for replicas in found.values() for u in replicas)

    # Preferred the other way round: the file on both is read at the other site first.
    planned = dry_run(did, tag, env, "prefer-b", "  prefer: [SANDBOX_SITE_B, SANDBOX_ORIGIN]\n")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert resolved(tag, "prefer-b")["ob"] == [f"{site_b}/ob.root", f"{origin}/ob.root"]

    # A storage element blocked, or left out by allow or by regex: the file it alone holds is an error before any
    # job, naming it; nothing resolved is kept.
    for name, replicas, lost in (
        ("block-b", "  block: [SANDBOX_SITE_B]\n", "b"),
        ("allow-b", "  allow: [SANDBOX_SITE_B]\n", "o"),
        ("regex-b", "  regex: 'SANDBOX_SITE_.*'\n", "o"),
    ):
        planned = dry_run(did, tag, env, name, replicas)
        said = planned.stdout + planned.stderr
        assert planned.returncode != 0, (name, said[-3000:])
        for words in (f"cms:/store/{tag}/{lost}.root", "no available replica", "no job was run"):
            assert words in said, (name, words, said[-3000:])
        assert not (REPO / "results" / f"{tag}-{name}" / "rucio" / "dataset.json").exists()


def test_a_did_rucio_does_not_have_is_an_error_before_any_job(grid, tmp_path):
    gsi, config, _, did = grid
    env = user_env(config, proxies.make(gsi, tmp_path / "x509up", hours=1))
    tag = did.split("/")[2]
    missing = f"cms:/HepvineTest/{tag}-no-such/NANOAODSIM"
    planned = dry_run(missing, tag, env)
    said = planned.stdout + planned.stderr
    assert planned.returncode != 0
    for words in (missing, "DataIdentifierNotFound", "no job was run"):
        assert words in said, (words, said[-3000:])
    assert not (REPO / "results" / f"{tag}-run" / "rucio" / "dataset.json").exists()
