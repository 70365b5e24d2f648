"""The cache of expensive test inputs (kept.py), with a fake writer in place of hepvine.devtools.generate's: an entry is
made once per key and each test gets its own copy; other arguments or other sources make a new entry, and an unused
entry of other sources is removed then; a writer that fails leaves nothing behind; generated_dataset gives
generate's spec."""

from __future__ import annotations

import json
import os

import kept
import pytest


@pytest.fixture
def writes(tmp_path, monkeypatch) -> list[list]:
    """The arguments of each call of the (fake) writer, which writes them as the file's content."""
    monkeypatch.setattr(kept, "CACHE", tmp_path / "cache")
    calls: list[list] = []

    def fake_write(path, process, n_events, index=0, seed=1, compression=None, schema="compact", physics=None):
        calls.append([process, n_events, index, seed, schema, physics])
        path.write_text(json.dumps(calls[-1]))
        return {"path": str(path), "nevts": n_events}

    monkeypatch.setattr(kept, "WRITE_FILE", fake_write)
    return calls


def test_an_entry_is_made_once_and_each_test_gets_its_own_copy(tmp_path, writes):
    a = kept.generated_file(tmp_path / "a" / "x.root", "ttbar", 100, index=1, seed=2)
    b = kept.generated_file(tmp_path / "b.root", "ttbar", 100, index=1, seed=2)
    assert a == {"path": str(tmp_path / "a" / "x.root"), "nevts": 100} and len(writes) == 1
    (tmp_path / "a" / "x.root").write_text("changed by a test")
    c = kept.generated_file(tmp_path / "c.root", "ttbar", 100, index=1, seed=2)
    assert json.loads((tmp_path / "c.root").read_text()) == ["ttbar", 100, 1, 2, "compact", None]
    assert (tmp_path / "b.root").read_text() == (tmp_path / "c.root").read_text() and b["nevts"] == c["nevts"]
    kept.generated_file(tmp_path / "d.root", "ttbar", 100, index=1, seed=3)
    kept.generated_file(tmp_path / "e.root", "ttbar", 100, index=1, seed=2, schema="nanoaod")
    kept.generated_file(tmp_path / "f.root", "ttbar", 100, index=1, seed=2, schema="nanoaod", physics="compact")
    kept.generated_file(tmp_path / "g.root", "ttbar", 100, index=1, seed=2, schema="nanoaod", physics="nanoaod")
    assert len(writes) == 4 and len(list((tmp_path / "cache").glob("generated-*.root"))) == 4


def test_an_unused_entry_of_other_sources_is_removed_when_a_new_one_is_made(tmp_path, writes, monkeypatch):
    made = {}
    for sources in "abc":
        monkeypatch.setattr(kept, "generator_sources", lambda sources=sources: sources * 64)
        kept.generated_file(tmp_path / "x.root", "ttbar", 100)
        made[sources] = next((tmp_path / "cache").glob(f"generated-{sources * 16}-*.root"))
    os.utime(made["a"], (0, 0))  # a: unused for over a day (b: used just now)
    os.utime(made["c"], (0, 0))
    kept.generated_file(tmp_path / "y.root", "ttbar", 100)  # c's, used again: its time is now
    monkeypatch.setattr(kept, "generator_sources", lambda: "d" * 64)
    kept.generated_file(tmp_path / "z.root", "ttbar", 100)
    assert len(writes) == 4
    assert sorted(p.name[10:11] for p in (tmp_path / "cache").iterdir()) == ["b", "c", "d"]


def test_a_failing_writer_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(kept, "CACHE", tmp_path / "cache")

    def failing(path, *args, **kwargs):
        path.write_text("half")
        raise OSError("disk full")

    monkeypatch.setattr(kept, "WRITE_FILE", failing)
    with pytest.raises(OSError, match="disk full"):
        kept.generated_file(tmp_path / "x.root", "ttbar", 100)
    assert list((tmp_path / "cache").iterdir()) == [] and not (tmp_path / "x.root").exists()


def test_generated_dataset_gives_generates_spec_with_its_files_from_the_cache(tmp_path, writes):
    spec = kept.generated_dataset(tmp_path / "data", {"ttbar": 2, "data": 1}, 300, seed=4)
    assert spec["ttbar"]["nominal"] == {
        "nevts_total": 600,
        "files": [{"path": str(tmp_path / "data" / "ttbar" / f"ttbar_000{i}.root"), "nevts": 300} for i in range(2)],
    }
    assert "xsec" in spec["ttbar"] and "xsec" not in spec["data"]
    assert writes == [
        ["ttbar", 300, 0, 4, "compact", None],
        ["ttbar", 300, 1, 4, "compact", None],
        ["data", 300, 0, 4, "compact", None],
    ]
    again = kept.generated_dataset(tmp_path / "again", {"ttbar": 2, "data": 1}, 300, seed=4)
    assert len(writes) == 3 and json.dumps(again).replace("again", "data") == json.dumps(spec)
