"""Site configs: every shipped config validates; routes take the form of the site's access mode; a bad config
names the key and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from hepvine import site

REPO = Path(__file__).resolve().parents[2]
SANDBOX_ENV = {"HEPVINE_XROOTD_ORIGIN": "root://127.0.0.1:1000", "HEPVINE_XCACHE_RACK_A": "root://127.0.0.1:1001",
               "HEPVINE_XCACHE_RACK_B": "root://127.0.0.1:1002", "HEPVINE_XCACHE_RACK_A_DISK": "/srv/a",
               "HEPVINE_XCACHE_RACK_B_DISK": "/srv/b"}


@pytest.fixture
def sandbox_env(monkeypatch):
    for key, value in SANDBOX_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("name", ["sandbox", "uchicago-af", "nebraska-coffea-casa", "freiburg-nemo", "cern-eos"])
def test_shipped_configs_validate(name, sandbox_env):
    config = site.load(REPO / "site-configs" / f"{name}.yaml")
    assert config.name == name
    assert {g["name"] for g in config.worker_groups} <= {r["name"] for r in config.racks}


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


@pytest.mark.parametrize("line", ["XRD_REQUESTTIMEOUT: '60; touch /tmp/hepvine-pwned'",
                                  "XRD_REQUESTTIMEOUT: '$(touch /tmp/hepvine-pwned)'",
                                  "XRD_REQUESTTIMEOUT: '`id`'", "XRD_REQUESTTIMEOUT: \"a\\nb\"",
                                  "'LD_PRELOAD': /tmp/evil.so", "'XRD_A B': 1"])
def test_hostile_xrootd_client_settings_are_refused_naming_the_key(tmp_path, sandbox_env, line):
    """XRootD client settings reach each job's environment (never a shell); still, only XRD_ names and plain values
    are accepted, and the error names the key."""
    text = (REPO / "site-configs" / "sandbox.yaml").read_text()
    assert "  XRD_REQUESTTIMEOUT: 60\n" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  XRD_REQUESTTIMEOUT: 60\n", f"  {line}\n"))
    with pytest.raises(site.SiteError, match=r"xrootd_client"):
        site.load(bad)
