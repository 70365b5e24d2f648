"""Dataset specs: good specs load (JSON and YAML) and flatten to one task per file; bad specs fail with every
problem named by its entry."""

from __future__ import annotations

import json

import pytest
import yaml

from hepvine import dataset

GOOD = {
    "ttbar": {"xsec": 729.84, "nominal": {"nevts_total": 30, "files": [
        {"path": "root://cache//store/ttbar_0.root", "nevts": 10},
        {"path": "root://cache//store/ttbar_1.root", "nevts": 20}]}},
    "data": {"nominal": {"nevts_total": 5, "files": [{"path": "data/data_0.root", "nevts": 5}]}},
}


@pytest.mark.parametrize("suffix, dump", [(".json", json.dumps), (".yaml", yaml.safe_dump)])
def test_good_spec_loads_and_flattens(tmp_path, suffix, dump):
    path = tmp_path / f"spec{suffix}"
    path.write_text(dump(GOOD))
    spec = dataset.load(path)
    tasks = dataset.tasks(spec)
    assert [t.fid for t in tasks] == ["data/nominal/0", "ttbar/nominal/0", "ttbar/nominal/1"]
    assert tasks[0].xsec is None and tasks[1].xsec == 729.84 and tasks[2].nevts_total == 30


def test_bad_spec_names_every_entry(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["ttbar"]["xsec"] = -1
    bad["ttbar"]["nominal"]["files"][1]["nevts"] = 0
    bad["ttbar"]["nominal"]["files"][0]["bytes"] = "1 GB"
    bad["ttbar"]["nominal"]["files"].append({"path": "root://cache//store/ttbar_0.root", "nevts": 3})
    bad["data"]["nominal"]["nevts_total"] = "many"
    bad["wjets"] = {"nominal": {"files": []}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(dataset.DatasetError) as e:
        dataset.load(path)
    message = str(e.value)
    assert str(path) in message
    for expected in ("ttbar/xsec: must be a positive number", "ttbar/nominal/files[1]/nevts: must be a positive",
                     "ttbar/nominal/files[2]/path: root://cache//store/ttbar_0.root is listed twice, here and at "
                     "ttbar/nominal/files[0]",
                     "data/nominal/nevts_total: must be a positive integer, got 'many'",
                     "ttbar/nominal/files[0]/bytes: the file's size must be a positive integer, got '1 GB'",
                     "wjets/nominal/files: must be a non-empty list", "wjets/nominal/nevts_total"):
        assert expected in message, message


def test_unreadable_and_malformed_specs(tmp_path):
    with pytest.raises(dataset.DatasetError, match="cannot be read"):
        dataset.load(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(dataset.DatasetError, match="not valid JSON"):
        dataset.load(tmp_path / "broken.json")


def test_a_path_under_two_processes_is_refused_naming_both(tmp_path):
    twice = json.loads(json.dumps(GOOD))
    twice["data"]["nominal"]["files"].append({"path": "root://cache//store/ttbar_1.root", "nevts": 20})
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(twice))
    with pytest.raises(dataset.DatasetError, match=r"data/nominal/files\[1\]/path: root://cache//store/ttbar_1.root "
                       r"is listed twice, here and at ttbar/nominal/files\[1\]"):
        dataset.load(path)
