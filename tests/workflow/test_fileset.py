"""coffea filesets as datasets (``hepvine.model.fileset``, through ``hepvine.model.dataset``): the plain and
preprocessed forms become one task per file with coffea's dataset key as written, its metadata, tree, uuid and steps;
keys with slashes (DAS names) get safe names for paths and job names; every problem is named by its entry before any
job; the updated fileset (routes, copies) is a fileset again."""

from __future__ import annotations

import json

import pytest

from hepvine.model import dataset, fileset

DAS = "/TTtoLNu2Q_TuneCP5_13p6TeV_powheg-pythia8/Run3Summer22NanoAODv12-130X_mcRun3_2022_realistic_v5-v2/NANOAODSIM"


def write(tmp_path, doc) -> str:
    path = tmp_path / "fileset.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_plain_fileset_gives_one_task_per_file_with_the_key_as_written(tmp_path):
    doc = {
        DAS: {"files": {"a.root": "Events", "b.root": "Other"}, "metadata": {"xs": 1.5}},
        "data": ["c.root"],
        "mc": {"files": ["d.root"], "treename": "Tree"},
    }
    tasks = dataset.tasks(dataset.load(write(tmp_path, doc)))
    safe = fileset.safe_name(DAS)
    assert [t.fid for t in tasks] == [f"{safe}/files/0", f"{safe}/files/1", "data/files/0", "mc/files/0"]
    assert [t.dataset for t in tasks] == [DAS, DAS, "data", "mc"]
    assert [t.treename for t in tasks] == ["Events", "Other", "Events", "Tree"]
    assert tasks[0].metadata == {"xs": 1.5} and tasks[2].metadata == {}
    assert all(t.nevts is None and t.uuid is None and t.steps is None for t in tasks)


def test_safe_names_are_path_components_and_never_meet():
    assert fileset.safe_name("DYJets_2022") == "DYJets_2022"
    names = {fileset.safe_name(k) for k in (DAS, DAS + "x", "/a/b", "a_b", ".hidden", "a b")}
    assert len(names) == 6
    for name in names:
        assert "/" not in name and " " not in name and not name.startswith(".")
    assert fileset.safe_name(DAS).startswith("TTtoLNu2Q_TuneCP5_13p6TeV")


def test_preprocessed_fileset_gives_entries_uuid_and_steps(tmp_path):
    doc = {
        "ttbar": {
            "files": {
                "t.root": {"object_path": "Events", "num_entries": 200, "uuid": "abc", "steps": [[0, 100], [100, 200]]}
            },
            "metadata": None,
            "form": "...",
            "compressed_form": "...",
        }
    }
    (task,) = dataset.tasks(dataset.load(write(tmp_path, doc)))
    assert (task.nevts, task.uuid, task.steps, task.treename) == (200, "abc", [[0, 100], [100, 200]], "Events")


def test_every_problem_is_named_by_its_entry(tmp_path):
    doc = {
        "a": {"files": {"x.root": "Events", "": "Events"}},
        "b": {"files": {"x.root": {"num_entries": -1}}},
        "c": {"files": {"y.root": {"steps": [[5, 1]]}}},
        "d": ["z.root", "x.root"],
        "e": {"files": ["e.root"], "metadata": {"entrystart": 5, "dataset": "other", "xsec": 1.0}},
        "f": {
            "files": {
                "f.root": {"steps": [[0, 10], [5, 20]]},
                "g.root": {"num_entries": 20, "steps": [[0, 30]]},
                "h.root": {"num_entries": 20, "steps": []},
            }
        },
    }
    with pytest.raises(dataset.DatasetError) as raised:
        dataset.load(write(tmp_path, doc))
    message = str(raised.value)
    assert "a/files[1]: a file must be a non-empty path" in message
    assert "b/files[0] (x.root): num_entries must be a non-negative integer" in message
    assert "c/files[0] (y.root): steps must be a list" in message
    assert "d/files[1]: x.root is listed twice, here and at a/files[0]" in message
    assert "e/metadata: 'dataset', 'entrystart' is coffea's own" in message and "rename that entry" in message
    assert "f/files[0] (f.root): steps [0, 10] and [5, 20] overlap or are out of order" in message
    assert "f/files[1] (g.root): step [0, 30] ends past its num_entries, 20" in message
    assert "f/files[2] (h.root): steps is empty, so no entry of it would be read" in message


def test_the_metadata_names_refused_are_coffeas_own():
    """A fileset's metadata may hold none of the names coffea's Runner refuses there (it sets them itself)."""
    from coffea.processor import executor

    assert fileset.RESERVED_METADATA == executor._PROTECTED_NAMES


def test_an_agc_spec_is_the_coffea_datasets_process__variation():
    spec = {
        "ttbar": {"nominal": {"nevts_total": 10, "files": [{"path": "t.root", "nevts": 10}]}, "xsec": 2.0},
        "data": {"nominal": {"nevts_total": 5, "files": [{"path": "d.root", "nevts": 5}]}},
    }
    data, ttbar = dataset.tasks(spec)
    assert (ttbar.fid, ttbar.dataset) == ("ttbar/nominal/0", "ttbar__nominal")
    assert ttbar.metadata == {"process": "ttbar", "variation": "nominal", "xsec": 2.0, "nevts_total": 10, "era": None}
    assert data.metadata["xsec"] is None


def test_updated_fileset_is_a_fileset_with_the_new_paths(tmp_path):
    doc = {DAS: {"files": {"a.root": "Events", "b.root": "Events"}, "metadata": {"xs": 1}}}
    moved = dataset.updated(
        doc,
        lambda task, entry: {"path": f"copies/{task.index}.root", "source": entry["path"]} if task.index == 0 else {},
    )
    assert moved == {
        DAS: {
            "files": {
                "copies/0.root": {"object_path": "Events", "source": "a.root"},
                "b.root": {"object_path": "Events"},
            },
            "metadata": {"xs": 1},
        }
    }
    assert [t.path for t in dataset.tasks(moved)] == ["copies/0.root", "b.root"]
