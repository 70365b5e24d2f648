"""Reading with a WLCG bearer token, checked by a real XRootD server (issue 32): the sandbox's token origin serves
the origin's data only over TLS to a reader whose token (XRootD's ztn protocol) XRootD's SciTokens plugin accepts:
signed by the sandbox's issuer (whose keys the origin serves over HTTPS for scitokens-cpp to fetch), not expired,
for the sandbox's audience, with a storage.read scope that covers the path. Tokens are minted as the issuer would
(``hepvine.devtools.tokens``).

- xrdcp with a token reads; without one, with an expired one, a forged one (another key) or one whose scope does
  not cover the file it is refused by the server;
- each token XCache admits the same tokens only (the scope checked by the cache itself, also for a file it holds)
  and fetches what it lacks from the origin with its own token: the origin sees the cache's subject, not the user's;
- a campaign on the sandbox-token profile and site (HTCondor-provisioned TaskVine workers with no token of their
  own) completes exactly, every task reading through a token XCache with the token TaskVine brought it, though the
  token expired in the middle of the run (it was renewed before, as htgettoken renews a token file); the token is in
  no file the campaign wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from credentialed import (
    FILES,
    assert_nowhere,
    assert_read_after_the_end,
    default_credentials_aside,
    report,
    run_across_a_renewal,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hepvine.devtools import tokens

pytestmark = [pytest.mark.sandbox, pytest.mark.pool]

REPO = Path(__file__).resolve().parents[2]
NANOAOD = REPO.parent / "shared" / "nanoaod"


@pytest.fixture
def token_origin(services):
    """(the token origin's services entry, the store URL of a fresh directory of real files it serves, tag)."""
    origin = services["xrootd"]["origin_token"]
    tag = f"test-token-{uuid.uuid4().hex[:8]}"
    store = Path(origin["data_dir"]) / "store" / tag
    store.mkdir(parents=True)
    for k in range(FILES):
        shutil.copy(NANOAOD / "nano_dimuon.root", store / f"dimuon-{k}.root")
    with default_credentials_aside():
        yield origin, f"{origin['url']}//store/{tag}", tag
    shutil.rmtree(store, ignore_errors=True)
    for path in (REPO / "results").glob(f"{tag}*"):
        shutil.rmtree(path, ignore_errors=True)


def xrdcp(url: str, token_file: Path | None, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEARER_TOKEN")}
    env["BEARER_TOKEN_FILE"] = str(token_file or tmp_path / "no-such-token")
    return subprocess.run(
        ["xrdcp", "-f", url, str(tmp_path / "copy.root")], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_token_origin_reads_only_for_a_valid_token_of_its_issuer(token_origin, tmp_path):
    origin, store, tag = token_origin
    issuer = origin["tokens"]
    url = f"{store}/dimuon-0.root"
    good = xrdcp(url, tokens.write(tmp_path / "good", tokens.mint(issuer, 600)), tmp_path)
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "copy.root").read_bytes() == (NANOAOD / "nano_dimuon.root").read_bytes()
    other_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    refused = {
        "no token": None,
        "expired": tokens.mint(issuer, -600),
        "forged": tokens.mint(issuer, 600, key_pem=other_key),
        "another path": tokens.mint(issuer, 600, scope=f"storage.read:/{tag}-elsewhere"),
    }
    for why, token in refused.items():
        done = xrdcp(url, tokens.write(tmp_path / "bad", token) if token else None, tmp_path)
        assert done.returncode != 0, why
    scoped = tokens.mint(issuer, 600, scope=f"storage.read:/{tag}")
    assert xrdcp(url, tokens.write(tmp_path / "scoped", scoped), tmp_path).returncode == 0


def test_the_token_caches_read_for_a_token_and_from_the_origin_as_themselves(services, token_origin, tmp_path):
    """Each token XCache reads for a valid token of the issuer only, and fetches what it lacks from the token origin
    with a token of its own: the origin's log shows the caches' subject. Once it holds a file, the cache still
    refuses an expired token and one whose scope does not cover the file (it authorises by itself)."""
    origin, store, tag = token_origin
    issuer = origin["tokens"]
    good = tokens.write(tmp_path / "good", tokens.mint(issuer, 600))
    refused = {
        "no token": None,
        "expired": tokens.write(tmp_path / "expired", tokens.mint(issuer, -600)),
        "another path": tokens.write(tmp_path / "other", tokens.mint(issuer, 600, scope=f"storage.read:/{tag}-x")),
    }
    for k, cache in enumerate(services["xrootd"]["caches_token"].values()):
        url = f"{cache['url']}//store/{tag}/dimuon-{k}.root"
        assert xrdcp(url, None, tmp_path).returncode != 0, cache["url"]
        read = xrdcp(url, good, tmp_path)
        assert read.returncode == 0, read.stderr
        assert (tmp_path / "copy.root").read_bytes() == (NANOAOD / "nano_dimuon.root").read_bytes()
        assert (Path(cache["cache_dir"]) / "store" / tag / f"dimuon-{k}.root").exists()  # cached, from the origin
        for why, token_file in refused.items():
            assert xrdcp(url, token_file, tmp_path).returncode != 0, (why, cache["url"])
    logins = Path(origin["log"]).read_text().splitlines()
    assert any(" login as hepvine-sandbox-xcache" in line for line in logins), logins[-5:]


def test_a_campaign_reads_with_the_users_token_renewed_while_it_runs(services, token_origin, tmp_path):
    origin, store, tag = token_origin
    issuer = origin["tokens"]
    urls = [f"{store}/dimuon-{k}.root" for k in range(FILES)]
    fileset = {"dimuon": {"files": dict.fromkeys(urls, "Events")}}
    (REPO / "results" / tag).mkdir(parents=True, exist_ok=True)
    (REPO / "results" / tag / "fileset.json").write_text(json.dumps(fileset))
    token_file = tmp_path / "bt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEARER_TOKEN")}
    env["BEARER_TOKEN_FILE"] = str(token_file)
    written = []

    def write(seconds: float) -> None:
        token = tokens.mint(issuer, seconds)
        tokens.write(token_file, token)
        written.append(token.rsplit(".", 1)[1].encode())  # its signature

    done, expires = run_across_a_renewal("sandbox-token", tag, env, write)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "hepvine: reading with bearer token $BEARER_TOKEN_FILE" in done.stderr
    result = report(tag, "run")
    assert result["files"] == {"total": FILES, "ok": FILES, "failed": 0}
    caches = tuple(c["url"] for c in services["xrootd"]["caches_token"].values())
    assert all(r["read_from"].startswith(caches) and r["host"] for r in result["inputs"]), result["inputs"][0]
    assert_read_after_the_end(result, expires)
    assert len(written) == 2
    assert_nowhere(tag, done, written)
