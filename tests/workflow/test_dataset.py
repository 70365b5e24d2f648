"""Dataset specs: good specs load (JSON and YAML) and flatten to one task per file; bad specs fail with every
problem named by its entry."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from hepvine.model import dataset

GOOD = {
    "ttbar": {
        "xsec": 729.84,
        "nominal": {
            "nevts_total": 30,
            "files": [
                {"path": "root://cache//store/ttbar_0.root", "nevts": 10},
                {"path": "root://cache//store/ttbar_1.root", "nevts": 20},
            ],
        },
    },
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
    for expected in (
        "ttbar/xsec: must be a positive number",
        "ttbar/nominal/files[1]/nevts: must be a positive",
        "ttbar/nominal/files[2]/path: root://cache//store/ttbar_0.root is listed twice, here and at "
        "ttbar/nominal/files[0]",
        "data/nominal/nevts_total: must be a positive integer, got 'many'",
        "ttbar/nominal/files[0]/bytes: the file's size must be a positive integer, got '1 GB'",
        "wjets/nominal/files: must be a non-empty list",
        "wjets/nominal/nevts_total",
    ):
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
    with pytest.raises(
        dataset.DatasetError,
        match=r"data/nominal/files\[1\]/path: root://cache//store/ttbar_1.root "
        r"is listed twice, here and at ttbar/nominal/files\[1\]",
    ):
        dataset.load(path)


def test_the_schema_is_valid_and_every_rule_has_its_words():
    schema = yaml.safe_load(dataset.SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    rules = [
        schema,
        schema["propertyNames"],
        *schema["$defs"].values(),
        schema["$defs"]["process"]["propertyNames"],
        *(rule for d in schema["$defs"].values() for rule in d.get("properties", {}).values()),
    ]
    assert all(rule.get("errorMessage") for rule in rules)


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda s: s.clear(), "(top level): the spec must be a non-empty mapping of process name to variations"),
        (lambda s: s.update({"tt bar": s.pop("ttbar")}), "tt bar: a process name may use letters, digits"),
        (
            lambda s: s["ttbar"].update({"nom/inal": s["ttbar"].pop("nominal")}),
            "ttbar/nom/inal: a variation name may use",
        ),
        (lambda s: s.update(ttbar=[1]), "ttbar: must map variation names (and 'xsec') to file lists"),
        (lambda s: s.update(ttbar={"xsec": 1.0}), "ttbar: has no variation (e.g. 'nominal')"),
        (lambda s: s["ttbar"].update(nominal="all"), "ttbar/nominal: must be a mapping with 'nevts_total' and 'files'"),
        (
            lambda s: s["ttbar"]["nominal"].update(nfiles=2),
            "ttbar/nominal: unknown key(s) nfiles (expected 'nevts_total' and 'files')",
        ),
        (
            lambda s: s["ttbar"]["nominal"].pop("nevts_total"),
            "ttbar/nominal/nevts_total: must be a positive integer, got nothing",
        ),
        (
            lambda s: s["ttbar"]["nominal"].update(nevts_total=30.0),
            "ttbar/nominal/nevts_total: must be a positive integer, got 30.0",
        ),
        (
            lambda s: s["ttbar"]["nominal"].update(nevts_total=29),
            "ttbar/nominal/nevts_total: 29 is less than the 30 events its files list",
        ),
        (
            lambda s: s["ttbar"]["nominal"]["files"].__setitem__(1, "f.root"),
            "ttbar/nominal/files[1]: must be a mapping with 'path' and 'nevts'",
        ),
        (
            lambda s: s["ttbar"]["nominal"]["files"][1].pop("path"),
            "ttbar/nominal/files[1]/path: must be a local path or a root:// URL",
        ),
        (
            lambda s: s["ttbar"]["nominal"]["files"][1].update(nevts=True),
            "ttbar/nominal/files[1]/nevts: must be a positive integer, got True",
        ),
        (lambda s: s["ttbar"].update(era=2022), "ttbar/era: must be the name of an era of hepvine"),
        (lambda s: s["ttbar"].update(xsec="729"), "ttbar/xsec: must be a positive number (pb), or absent for data"),
    ],
)
def test_each_problem_is_named_by_its_entry(change, expected):
    bad = json.loads(json.dumps(GOOD))
    change(bad)
    found = dataset.problems(bad)
    assert any(p.startswith(expected) for p in found), found
    assert len(found) == 1, found  # one mistake, one problem (and not the schema's words next to ours)


ENTRIES = [
    {"path": "a.root", "nevts": 1},
    {"path": "a.root", "nevts": 1, "bytes": 10, "route": {}},
    {"path": "a.root", "nevts": 1, "source": "b.root"},
    {"path": "", "nevts": 1},
    {"path": 3, "nevts": 1},
    {"nevts": 1},
    {"path": "a.root"},
    {"path": "a.root", "nevts": 0},
    {"path": "a.root", "nevts": -1},
    {"path": "a.root", "nevts": 1.0},
    {"path": "a.root", "nevts": "1"},
    {"path": "a.root", "nevts": False},
    {"path": "a.root", "nevts": 1, "bytes": 0},
    {"path": "a.root", "nevts": 1, "bytes": None},
    {"path": "a.root", "nevts": 1, "bytes": 1.5},
    {"path": "a.root", "nevts": 1, "bytes": True},
    {"path": None, "nevts": 1},
    [],
    "a.root",
    None,
    1,
]


@pytest.mark.parametrize("entry", ENTRIES, ids=[json.dumps(e) for e in ENTRIES])
def test_the_fast_file_check_never_passes_what_the_schema_refuses(entry):
    """Each file entry is checked by dataset._plain_file and only an entry it does not pass goes to the schema: it
    must never pass an entry the schema refuses, and must pass the good ones (else 219,000 files take ~20 s)."""
    _, file_rule = dataset._validators()
    refused = list(file_rule.iter_errors(entry))
    assert dataset._plain_file(entry) is not bool(refused), refused


def rule_only(schema):
    """SCHEMA without its words (descriptions and error messages): what it accepts."""
    if not isinstance(schema, dict):
        return schema
    return {k: rule_only(v) for k, v in schema.items() if k not in ("description", "errorMessage")}


def test_the_fast_file_check_follows_the_schema_file_rule():
    """dataset._plain_file is written for this rule: change both together."""
    assert rule_only(yaml.safe_load(dataset.SCHEMA.read_text())["$defs"]["file"]) == {
        "type": "object",
        "required": ["path", "nevts"],
        "properties": {
            "path": {"type": "string", "minLength": 1},
            "nevts": {"type": "integer", "minimum": 1},
            "bytes": {"type": "integer", "minimum": 1},
        },
    }
