"""The demo's dataset (``hepvine.devtools.demo.ensure_dataset``): which files it writes and how, once, and the spec it
gives. The demo itself (``make demo``) runs the campaign on the sandbox's services: too slow for every test run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hepvine.devtools import catalogue, demo, generate
from hepvine.model import dataset

ORIGIN = "root://127.0.0.1:1094"
REPO = Path(__file__).resolve().parents[2]


def fake_write(path, process, n_events, index=0, seed=1, compression=None, schema="compact", physics=None):
    """Stands in for generate.write_file in the demo's worker processes: the file holds the arguments it got."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([process, n_events, index, seed, repr(compression), schema, physics]))
    return {"path": str(path), "nevts": n_events}


def refuse_write(*args, **kwargs):
    raise AssertionError("the dataset is already there: nothing may be written again")


def test_the_demo_writes_its_dataset_once_with_its_settings_and_a_valid_spec(tmp_path, monkeypatch):
    services = {"xrootd": {"origin": {"data_dir": str(tmp_path), "url": ORIGIN}}}
    monkeypatch.setattr(generate, "write_file", fake_write)
    spec = demo.ensure_dataset(services, workers=2)
    assert dataset.problems(spec) == []
    store = tmp_path / "store" / demo.STORE_DIR
    assert demo.STORE_DIR == "demo-nanoaod-compact-10000-lzma1"
    for process, count in demo.PROCESSES.items():
        files = spec[process]["nominal"]["files"]
        assert [f["path"] for f in files] == [
            f"{ORIGIN}//store/{demo.STORE_DIR}/{process}/{process}_{i:04d}.root" for i in range(count)
        ]
        for i, entry in enumerate(files):
            local = store / process / f"{process}_{i:04d}.root"
            assert json.loads(local.read_text()) == [
                process,
                demo.EVENTS_PER_FILE,
                i,
                2026,
                "LZMA(1)",
                "nanoaod",
                "compact",
            ]
            assert entry["nevts"] == demo.EVENTS_PER_FILE and entry["bytes"] == local.stat().st_size
        assert spec[process]["nominal"]["nevts_total"] == count * demo.EVENTS_PER_FILE
        assert ("xsec" in spec[process]) == (generate.PROCESSES[process].xsec_pb is not None)
    monkeypatch.setattr(generate, "write_file", refuse_write)
    assert demo.ensure_dataset(services, workers=2) == spec


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_the_demo_refuses_a_number_of_generating_processes_below_one(workers, capsys):
    with pytest.raises(SystemExit) as stopped:
        demo.main(["--generate-workers", workers])
    assert stopped.value.code == 2 and "is not a whole number of at least 1" in capsys.readouterr().err


def test_the_failover_demo_puts_every_file_at_both_sites_and_prefers_the_second(tmp_path):
    assert {demo.demo_rse(i, both=True) for i in range(12)} == {(catalogue.ORIGIN, catalogue.SITE_B)}
    assert {len(demo.demo_rse(i)) for i in range(12)} == {1, 2}  # the plain demo: some files at one site only
    site = REPO / "site-configs" / "sandbox.yaml"
    preferred = demo.site_b_preferred(str(site), tmp_path / "site.yaml")
    assert yaml.safe_load(preferred.read_text())["replicas"]["prefer"] == [catalogue.SITE_B, catalogue.ORIGIN]
    assert preferred.read_text().replace("SANDBOX_SITE_B, SANDBOX_ORIGIN", "SANDBOX_ORIGIN, SANDBOX_SITE_B") == (
        site.read_text()
    )
    # A site config that does not prefer the origin first has no failover to show: said, not run.
    with pytest.raises(SystemExit, match="does not prefer SANDBOX_ORIGIN first"):
        demo.site_b_preferred(str(preferred), tmp_path / "again.yaml")
