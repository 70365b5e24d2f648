"""Site configs: every shipped config validates; routes take the form of the site's access mode; a bad config
names the key and what to do; the worker groups are the executor plugin's, read by its own parser."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hepvine.routing import site
from snakemake_executor_plugin_taskvine import ExecutorSettings, provision

REPO = Path(__file__).resolve().parents[2]
SANDBOX_ENV = {
    "HEPVINE_XROOTD_ORIGIN": "root://127.0.0.1:1000",
    "HEPVINE_XCACHE_RACK_A": "root://127.0.0.1:1001",
    "HEPVINE_XCACHE_RACK_B": "root://127.0.0.1:1002",
    "HEPVINE_XCACHE_RACK_A_DISK": "/srv/a",
    "HEPVINE_XCACHE_RACK_B_DISK": "/srv/b",
}


@pytest.fixture
def sandbox_env(monkeypatch):
    for key, value in SANDBOX_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("name", ["sandbox", "uchicago-af", "nebraska-coffea-casa", "freiburg-nemo", "cern-eos"])
def test_shipped_configs_validate(name, sandbox_env):
    config = site.load(REPO / "site-configs" / f"{name}.yaml")
    assert config.name == name
    assert {g.name for g in config.worker_groups} <= {r["name"] for r in config.racks}


def test_routes_follow_the_access_mode(sandbox_env):
    sandbox = site.load(REPO / "site-configs" / "sandbox.yaml")
    route = sandbox.route("root://127.0.0.1:1000//store/demo/a.root")
    home = route.home
    assert route.lfn == "/store/demo/a.root" and home.cache in ("xcache-a", "xcache-b")
    assert home.rack == {"xcache-a": "rack-a", "xcache-b": "rack-b"}[home.cache]
    assert home.url == f"{SANDBOX_ENV['HEPVINE_XCACHE_RACK_' + home.rack[-1].upper()]}//store/demo/a.root"
    # fail over: the other cache, then the origin itself
    other = {"xcache-a": "xcache-b", "xcache-b": "xcache-a"}[home.cache]
    assert [s.cache for s in route.sources] == [home.cache, other, None]
    assert route.sources[-1].url == "root://127.0.0.1:1000//store/demo/a.root"
    assert route.as_dict()["cache"] == home.cache and len(route.as_dict()["sources"]) == 3
    assert sandbox.route("/tmp/local.root").sources == (site.Source(url="/tmp/local.root"),)  # read where it is
    assert sandbox.xrootd_client["XRD_REQUESTTIMEOUT"] == 60
    assert sandbox.rack_cores() == {"rack-a": 2, "rack-b": 2}

    proxy = site.load(REPO / "site-configs" / "freiburg-nemo.yaml")
    url = proxy.route("root://se.bfg.uni-freiburg.de:1094//atlas/x.root").home.url
    assert url.endswith(".nemo.uni-freiburg.de:1094//root://se.bfg.uni-freiburg.de:1094//atlas/x.root")

    direct = site.load(REPO / "site-configs" / "cern-eos.yaml")
    assert direct.route("root://eoscms.cern.ch//eos/cms/x.root").home.url == "root://eoscms.cern.ch//eos/cms/x.root"


def test_bad_config_names_the_key(tmp_path, sandbox_env):
    text = (REPO / "site-configs" / "sandbox.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    assert "rack: rack-b, gbps: 1," in text  # what the cases below change
    bad.write_text(text.replace("rack: rack-b, gbps: 1,", "rack: rack-z, gbps: -1,"))
    with pytest.raises(site.SiteError) as e:
        site.load(bad)
    assert str(bad) in str(e.value) and "caches.1.gbps" in str(e.value)
    bad.write_text(text.replace("rack: rack-b, gbps: 1,", "rack: rack-z, gbps: 1,"))
    with pytest.raises(site.SiteError, match=r"caches\[1\] \(xcache-b\): rack 'rack-z' is not one of racks"):
        site.load(bad)


def test_unset_variable_says_how_to_set_it(monkeypatch):
    monkeypatch.delenv("HEPVINE_XCACHE_RACK_A", raising=False)
    monkeypatch.setenv("HEPVINE_XROOTD_ORIGIN", "root://x")
    monkeypatch.setenv("HEPVINE_XCACHE_RACK_B", "root://y")
    with pytest.raises(site.SiteError, match=r"caches\[0\]\.url names \$\{HEPVINE_XCACHE_RACK_A\}"):
        site.load(REPO / "site-configs" / "sandbox.yaml")


@pytest.mark.parametrize(
    "line",
    [
        "XRD_REQUESTTIMEOUT: '60; touch /tmp/hepvine-pwned'",
        "XRD_REQUESTTIMEOUT: '$(touch /tmp/hepvine-pwned)'",
        "XRD_REQUESTTIMEOUT: '`id`'",
        'XRD_REQUESTTIMEOUT: "a\\nb"',
        "'LD_PRELOAD': /tmp/evil.so",
        "'XRD_A B': 1",
    ],
)
def test_hostile_xrootd_client_settings_are_refused_naming_the_key(tmp_path, sandbox_env, line):
    """XRootD client settings reach each job's environment (never a shell); still, only XRD_ names and plain values
    are accepted, and the error names the key."""
    text = (REPO / "site-configs" / "sandbox.yaml").read_text()
    assert "  XRD_REQUESTTIMEOUT: 60\n" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  XRD_REQUESTTIMEOUT: 60\n", f"  {line}\n"))
    with pytest.raises(site.SiteError, match=r"xrootd_client"):
        site.load(bad)


@pytest.mark.parametrize("name", ["sandbox", "uchicago-af", "nebraska-coffea-casa", "freiburg-nemo", "cern-eos"])
def test_the_workflow_and_the_executor_read_the_same_worker_groups(name, sandbox_env):
    """The profiles hand each site config to the executor as --taskvine-worker-groups: both read it with the one
    parser, so the cores the report and the planner count per rack are the cores the executor starts."""
    path = REPO / "site-configs" / f"{name}.yaml"
    executors, found = provision.worker_groups(ExecutorSettings(worker_groups=path))
    assert found == [] and executors, found
    sizes = [(g.name, g.features, g.condor_requirements, g.cores, g.max_workers) for g in site.load(path).worker_groups]
    assert sizes == [(g.name, g.features, g.condor_requirements, g.cores, g.max_workers) for g in executors]


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (
            "    cores: 2\n    memory_mb: 3500\n    disk_mb: 8000\n  - name: rack-b",
            "    cores: 0\n    memory_mb: 3500\n    disk_mb: 8000\n  - name: rack-b",
            "worker_groups: group rack-a: cores 0 must be a whole number >= 1",
        ),
        (
            "    max_workers: 1\n    cores: 2\n    memory_mb: 3500\n    disk_mb: 8000\n  - name: rack-b",
            "    max_workers: true\n    cores: 2\n    memory_mb: 3500\n    disk_mb: 8000\n  - name: rack-b",
            "worker_groups: group rack-a: max_workers True must be a whole number >= 1",
        ),
        (
            "  - name: rack-b\n",
            "  - name: rack-b\n    rack: rack-b\n",
            "worker_groups: group rack-b: unknown key(s) rack",
        ),
        (
            "  - name: rack-b\n",
            '  - name: "rack-b;id"\n',
            "worker_groups: worker_groups[1] name 'rack-b;id': use letters",
        ),
        ("  - name: rack-b\n", "  - name: rack-a\n", "worker_groups: group rack-a appears more than once"),
        (
            'condor_requirements: HepvineRack == "rack-b"',
            "condor_requirements: HepvineRack == $(x)",
            "worker_groups: group 'rack-b': condor_requirements 'HepvineRack == $(x)': write one line of a ClassAd",
        ),
    ],
)
def test_bad_worker_group_is_named_by_the_executors_parser(tmp_path, sandbox_env, old, new, expected):
    text = (REPO / "site-configs" / "sandbox.yaml").read_text()
    assert old in text  # what the case changes
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(site.SiteError) as e:
        site.load(bad)
    assert f"site config {bad}:" in str(e.value) and expected in str(e.value), str(e.value)


def test_loading_a_site_imports_no_taskvine():
    """The Snakefile imports hepvine.routing.site while it parses, on every job: the plugin's parser comes without
    TaskVine (only the plugin's adapter imports ndcctools, when a manager starts)."""
    code = "import sys, hepvine.routing.site; print(sorted(m for m in sys.modules if m.split('.')[0] == 'ndcctools'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_site_configs_holds_site_files_only():
    """site-configs/ is the sites: their YAMLs and the README that says what one is (the sandbox's build and
    services are in sandbox/)."""
    others = sorted(p.name for p in (REPO / "site-configs").iterdir() if p.suffix != ".yaml" and p.name != "README.md")
    assert others == [], f"site-configs/ holds {others}: only site YAMLs belong there (sandbox code: sandbox/)"
    assert "workflows/hepvine/model/schemas/site.schema.yaml" in (REPO / "site-configs" / "README.md").read_text()
