"""Samples named by Rucio DIDs, the logic alone (a fake client standing for Rucio's; the real server is in
tests/sandbox/test_rucio.py): replicas ordered by the site's preferences, specs resolved in both shapes, the
resolution kept and reused, errors that name the DID and the fix, and routes that fail over across replicas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hepvine.model import dataset
from hepvine.routing import replicas, site

REPO = Path(__file__).resolve().parents[2]
A, B = "root://a.example:1094", "root://b.example:1095"


class FakeRucio:
    """What hepvine asks of Rucio's client: list_files and list_replicas of a DID (files FILES: name → (RSEs,
    events))."""

    host = "https://rucio.example"
    account = "physicist"

    def __init__(self, files: dict[str, tuple[list[str], int | None]]):
        self.files, self.asked = files, 0

    def list_files(self, scope, name):
        self.asked += 1
        return [{"scope": scope, "name": n, "events": ev} for n, (_, ev) in self.files.items()]

    def list_replicas(self, dids, schemes, ignore_availability=True):
        assert schemes == ["root"] and ignore_availability is False  # only what can be read now
        urls = {"SITE_A": A, "SITE_B": B}
        for n, (rses, _) in self.files.items():
            yield {
                "scope": "cms",
                "name": n,
                "bytes": 1000,
                "adler32": "0badc0de",
                "rses": {r: [f"{urls[r]}/{n}"] for r in rses},
                "states": {r: "AVAILABLE" for r in rses},
            }


FILES = {"/store/x/1.root": (["SITE_A", "SITE_B"], 10), "/store/x/2.root": (["SITE_B"], 20)}


def test_replicas_are_ordered_by_the_sites_preferences():
    rses = ["T2_B", "T1_A", "T2_C"]
    assert replicas.ordered(rses, {}) == ["T1_A", "T2_B", "T2_C"]
    assert replicas.ordered(rses, {"prefer": ["T2_C"]}) == ["T2_C", "T1_A", "T2_B"]
    assert replicas.ordered(rses, {"block": ["T1_A"]}) == ["T2_B", "T2_C"]
    assert replicas.ordered(rses, {"allow": ["T2_B", "T2_C"], "prefer": ["T2_C", "T2_B"]}) == ["T2_C", "T2_B"]
    assert replicas.ordered(rses, {"regex": "T2_.*"}) == ["T2_B", "T2_C"]


def test_an_agc_sample_and_a_fileset_dataset_resolve_to_files_with_their_replicas():
    client = FakeRucio(FILES)
    agc = {"ttbar": {"xsec": 1.0, "nominal": {"rucio": "cms:/TT/X/NANOAODSIM"}}}
    spec = replicas.resolve(agc, lambda did: replicas.files_of(client, did, {"prefer": ["SITE_A"]}))
    assert dataset.problems(spec) == []
    sample = spec["ttbar"]["nominal"]
    assert sample["nevts_total"] == 30
    assert [(f["path"], f["replicas"], f["nevts"]) for f in sample["files"]] == [
        (f"{A}//store/x/1.root", [f"{A}//store/x/1.root", f"{B}//store/x/1.root"], 10),
        (f"{B}//store/x/2.root", [f"{B}//store/x/2.root"], 20),
    ]
    (task, _) = dataset.tasks(spec)
    assert task.replicas == (f"{A}//store/x/1.root", f"{B}//store/x/1.root")

    fileset = {"/TT/X/NANOAODSIM": {"rucio": "cms:/TT/X/NANOAODSIM", "metadata": {"kind": "mc"}}}
    spec = replicas.resolve(fileset, lambda did: replicas.files_of(client, did, {"prefer": ["SITE_B"]}))
    tasks = dataset.tasks(spec)
    assert [(t.dataset, t.path, t.replicas, t.nevts, t.metadata) for t in tasks] == [
        (
            "/TT/X/NANOAODSIM",
            f"{B}//store/x/1.root",
            (f"{B}//store/x/1.root", f"{A}//store/x/1.root"),
            10,
            {"kind": "mc"},
        ),
        ("/TT/X/NANOAODSIM", f"{B}//store/x/2.root", (f"{B}//store/x/2.root",), 20, {"kind": "mc"}),
    ]


def test_what_cannot_be_resolved_is_named_with_its_fix():
    client = FakeRucio(FILES)
    with pytest.raises(
        replicas.ResolutionError, match=r"1 file\(s\) have no available replica .*2\.root \(replicas: SITE_B\)"
    ):
        replicas.files_of(client, "cms:/TT/X/NANOAODSIM", {"block": ["SITE_B"]})
    with pytest.raises(replicas.ResolutionError, match="not a Rucio DID: write <scope>:<name>"):
        replicas.files_of(client, "/TT/X/NANOAODSIM", {})
    both = {"ttbar": {"a": {"rucio": "cms:/TT/A/NANOAODSIM"}, "b": {"rucio": "cms:/TT/B/NANOAODSIM"}}}
    with pytest.raises(replicas.ResolutionError, match="is in both cms:/TT/A/NANOAODSIM and cms:/TT/B/NANOAODSIM"):
        replicas.resolve(both, lambda did: replicas.files_of(client, did, {}))
    with pytest.raises(replicas.ResolutionError, match=r"beside xsec: .* name it in a variation"):
        replicas.resolve({"ttbar": {"xsec": 1.0, "rucio": "cms:/TT/X/NANOAODSIM"}}, lambda did: [])
    with pytest.raises(replicas.ResolutionError, match="names a DID .* and lists files: keep one of them"):
        replicas.resolve({"tt": {"nominal": {"rucio": "cms:/TT/X/NANOAODSIM", "files": []}}}, lambda did: [])
    empty = FakeRucio({"/store/x/0.root": (["SITE_A"], 0)})  # a file of no events is known, not unknown
    spec = replicas.resolve({"tt": {"nominal": {"rucio": "cms:/E"}}}, lambda did: replicas.files_of(empty, did, {}))
    assert spec["tt"]["nominal"]["nevts_total"] == 0
    unknown = FakeRucio({"/store/x/1.root": (["SITE_A"], None)})
    agc = {"ttbar": {"nominal": {"rucio": "cms:/TT/X/NANOAODSIM"}}}
    with pytest.raises(replicas.ResolutionError, match="does not know the events .* name the DID in a coffea fileset"):
        replicas.resolve(agc, lambda did: replicas.files_of(unknown, did, {}))


def test_the_resolution_is_kept_and_redone_only_when_the_spec_or_preferences_change(tmp_path, monkeypatch):
    client = FakeRucio(FILES)
    monkeypatch.setattr(replicas, "client", lambda vet=None: client)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"mc": {"rucio": "cms:/TT/X/NANOAODSIM"}}))
    out = tmp_path / "rucio"
    planned, doc = resolved(spec, out, {}, refresh=False, may_ask=True)
    assert planned == str(out / "dataset.json") and client.asked == 1
    assert doc == json.loads((out / "dataset.json").read_text())
    record = replicas.record(out)
    assert record["dids"] == {
        "cms:/TT/X/NANOAODSIM": {"files": 2, "bytes": 2000, "events": 30, "rses": {"SITE_A": 1, "SITE_B": 2}}
    }
    assert record["server"] == "https://rucio.example" and record["resolved_at"].endswith("Z")
    resolved(spec, out, {}, refresh=False, may_ask=True)
    resolved(spec, out, {"prefer": ["SITE_B"]}, refresh=False, may_ask=False)  # a job: reads it
    assert client.asked == 1
    resolved(spec, out, {"prefer": ["SITE_B"]}, refresh=False, may_ask=True)
    assert client.asked == 2
    before = (out / "dataset.json").stat().st_mtime_ns
    resolved(spec, out, {"prefer": ["SITE_B"]}, refresh=True, may_ask=True)
    assert client.asked == 3 and (out / "dataset.json").stat().st_mtime_ns == before  # the same files: kept as is
    # Snakemake's local jobs (may_ask False) read what the main process wrote, even when the config says refresh.
    assert resolved(spec, out, {}, refresh=True, may_ask=False)[0] == str(out / "dataset.json")
    assert client.asked == 3
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"mc": {"files": {"/data/a.root": "Events"}}}))
    assert resolved(plain, tmp_path / "other", {}, refresh=False, may_ask=True) == (
        str(plain),
        json.loads(plain.read_text()),
    )


def resolved(spec: Path, *args, **kwargs):
    """replicas.resolved of the spec file SPEC, read as the workflow reads it."""
    return replicas.resolved(str(spec), dataset.read(spec), *args, **kwargs)


def test_a_files_replicas_are_its_fail_overs(monkeypatch):
    for key, value in {
        "HEPVINE_XROOTD_ORIGIN": A,
        "HEPVINE_XCACHE_RACK_A": "root://127.0.0.1:1001",
        "HEPVINE_XCACHE_RACK_B": "root://127.0.0.1:1002",
        "HEPVINE_XCACHE_RACK_A_DISK": "/srv/a",
        "HEPVINE_XCACHE_RACK_B_DISK": "/srv/b",
    }.items():
        monkeypatch.setenv(key, value)
    sandbox = site.load(REPO / "site-configs" / "sandbox.yaml")
    assert sandbox.replicas == {"prefer": ["SANDBOX_ORIGIN", "SANDBOX_SITE_B"]}
    # On the origin the caches front: the caches, the origin, then the other site.
    route = sandbox.route(f"{A}//store/x/1.root", (f"{A}//store/x/1.root", f"{B}//store/x/1.root"))
    assert {s.cache for s in route.sources[:2]} == {"xcache-a", "xcache-b"} and route.sources[2].cache is None
    assert [s.url for s in route.sources[2:]] == [f"{A}//store/x/1.root", f"{B}//store/x/1.root"]
    # Preferred at another site: read there, then at the next replica; no cache fronts it.
    route = sandbox.route(f"{B}//store/x/2.root", (f"{B}//store/x/2.root", f"{A}//store/x/2.root"))
    assert [(s.url, s.cache) for s in route.sources] == [(f"{B}//store/x/2.root", None), (f"{A}//store/x/2.root", None)]
    # Only at another site: there, and nowhere else (even if the caches' origin has a file of that name).
    assert sandbox.route(f"{B}//store/x/3.root", (f"{B}//store/x/3.root",)).sources == (
        site.Source(url=f"{B}//store/x/3.root"),
    )


def test_an_origin_is_the_same_server_with_or_without_xrootds_default_port():
    assert site.server("root://a.example") == site.server("root://a.example:1094//store/x.root") == "a.example:1094"
    assert site.server("root://127.0.0.1:25503//store/x.root") == "127.0.0.1:25503"


@pytest.fixture
def rucio_settings(monkeypatch):
    """rucio.cfg's [client] section as Rucio's config module gives it: a dict the test fills."""
    import rucio.common.config

    settings: dict[str, str] = {}
    monkeypatch.setattr(rucio.common.config, "config_has_section", lambda section: section == "client")
    monkeypatch.setattr(
        rucio.common.config,
        "config_get",
        lambda section, key, raise_exception=True, default=None, **kw: (
            settings[key] if key in settings or raise_exception else default
        ),
    )
    return settings


def test_the_proxy_rucio_presents_is_found_where_its_client_looks(rucio_settings, monkeypatch):
    rucio_settings.update(auth_type="x509_proxy", client_x509_proxy="~/from-cfg")
    monkeypatch.setenv("PROXIES", "/env")
    env = {"RUCIO_CLIENT_PROXY": "$PROXIES/rucio ", "X509_USER_PROXY": "/a/x509"}
    assert replicas.presented_proxy(env, 7) == (Path("/env/rucio"), "$RUCIO_CLIENT_PROXY")
    assert replicas.presented_proxy({"X509_USER_PROXY": "/a/x509"}, 7) == (
        Path("~/from-cfg").expanduser(),
        "rucio.cfg's client_x509_proxy",
    )
    del rucio_settings["client_x509_proxy"]
    assert replicas.presented_proxy({"X509_USER_PROXY": "a/x509"}, 7) == (Path("a/x509").absolute(), "$X509_USER_PROXY")
    assert replicas.presented_proxy({}, 7) == (Path("/tmp/x509up_u7"), "the default place")
    # Set is set, as the client decides: a variable set to nothing is not passed over for the next place.
    with pytest.raises(replicas.ResolutionError, match=r"\$X509_USER_PROXY is set to nothing"):
        replicas.presented_proxy({"X509_USER_PROXY": ""}, 7)
    # Another authentication (the environment's before rucio.cfg's, as the client decides): no proxy.
    assert replicas.presented_proxy({"RUCIO_AUTH_TYPE": "userpass", "X509_USER_PROXY": "/a/x509"}, 7) is None
    assert replicas.presented_proxy({"RUCIO_AUTH_TYPE": "", "X509_USER_PROXY": "/a/x509"}, 7) is None
    rucio_settings["auth_type"] = "userpass"
    assert replicas.presented_proxy({"X509_USER_PROXY": "/a/x509"}, 7) is None
    assert replicas.presented_proxy({"RUCIO_AUTH_TYPE": "x509_proxy"}, 7) == (
        Path("/tmp/x509up_u7"),
        "the default place",
    )


class Refused(Exception):
    """Stands for Rucio's CannotAuthenticate."""


def test_the_client_is_made_after_its_proxy_is_vetted_and_a_refusal_names_it(rucio_settings, monkeypatch, tmp_path):
    import rucio.client

    made = []

    def fake_client():
        made.append(1)
        if rucio_settings.get("refuse"):
            raise Refused("Cannot authenticate to account analysis")
        return "client"

    monkeypatch.setattr(rucio.client, "Client", fake_client)
    monkeypatch.delenv("RUCIO_AUTH_TYPE", raising=False)
    monkeypatch.delenv("RUCIO_CLIENT_PROXY", raising=False)
    monkeypatch.setenv("X509_USER_PROXY", str(tmp_path / "x509up"))
    vetted = []

    def vet(path, source):
        vetted.append((path, source))
        if rucio_settings.get("expired"):
            raise ValueError("X.509 proxy ...: EXPIRED 1 s ago; make a new one: voms-proxy-init")
        return "X.509 proxy $X509_USER_PROXY: /DC=org/CN=Someone, 11 h left"

    # Userpass: nothing to vet.
    rucio_settings.update(rucio_host="https://rucio.example", auth_type="userpass")
    assert replicas.client(vet) == "client" and vetted == []
    # A proxy: vetted first, then the client made.
    rucio_settings["auth_type"] = "x509_proxy"
    assert replicas.client(vet) == "client" and vetted == [(tmp_path / "x509up", "$X509_USER_PROXY")]
    # Refused by the vetting: the client is not made, the words say what and how.
    rucio_settings["expired"] = True
    with pytest.raises(replicas.ResolutionError, match=r"auth_type = x509_proxy\): X.509 proxy .*EXPIRED.*voms-proxy"):
        replicas.client(vet)
    assert len(made) == 2
    # Refused by the server: the error names the proxy presented.
    rucio_settings.update(expired=False, refuse=True)
    with pytest.raises(
        replicas.ResolutionError, match=r"with the X.509 proxy \$X509_USER_PROXY: /DC=org/CN=Someone.*Refused"
    ):
        replicas.client(vet)
    # No server named: said before anything else, with where the configuration comes from.
    del rucio_settings["rucio_host"]
    with pytest.raises(replicas.ResolutionError, match=r"no server to ask.*RUCIO_CONFIG"):
        replicas.client(vet)
