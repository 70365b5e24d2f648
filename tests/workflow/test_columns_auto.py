"""config ``columns: auto``, the default (``hepvine.jobs.driver._run_entry``): chunks cut as with ``columns: traced``
(``hepvine.work.cutform``), and a file whose processing falls short of its cut run again with every field, its output
what ``columns: all`` gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from processors import CAUGHT, CHUNKSIZE, RETURNS, fileset_in

from hepvine.jobs import driver
from hepvine.model import dataset
from hepvine.model.limits import Limits
from hepvine.reading import fetch
from hepvine.routing import index
from hepvine.work import processor

NANOAOD = Path(__file__).resolve().parents[3] / "shared" / "nanoaod"

# Reads the muons after a file's first chunk (its trace, on an empty chunk, does not see them), counting its calls
# in its process: what state a file's run starts from shows in its output.
COUNTING = """
import awkward as ak

CALLS = []


def f(events):
    CALLS.append(events.metadata["entrystart"])
    out = {"calls": len(CALLS), "jets": int(ak.sum(ak.num(events.Jet.pt)))}
    if events.metadata["entrystart"] > 0:
        out["muons"] = int(ak.sum(ak.num(events.Muon.pt)))
    return out
"""


def one_batch(*names: str):
    """The one batch (``index.plan``, local routes) of a fileset of NAMES, real files of ../shared/nanoaod."""
    (batch,) = index.plan(
        dataset.tasks(fileset_in(NANOAOD, {"mc": {"files": dict.fromkeys(names, "Events")}})), 8, fetch.local_route
    )
    return batch


def test_columns_auto_runs_a_file_again_with_every_field_where_its_cut_falls_short(tmp_path, capsys):
    """The default, config columns: auto, in a job whose files each run in a process of their own (a campaign's): the
    first file's processing uses the muons its trace did not see; the job runs it again with every field, from the
    job's state before the file (the analysis's calls counted anew), and the job's files after it so. The job's
    output and its records' events are what columns: all gives; its log names the file, the field and the fix."""
    (tmp_path / "counting.py").write_text(COUNTING)
    batch = one_batch("ttH_M125_2017.root", "ggH_M125_amcatnlo_v13.root")
    limits = Limits(rate_floor_mb_s=1, file_time_base_s=120, bytes_per_event=1)
    got = {}
    for columns in ("auto", "all"):
        analysis = processor.load(f"{tmp_path}/counting.py:f", chunksize=CHUNKSIZE, columns=columns)
        capsys.readouterr()
        result = driver.run_batch(index.shard(batch, {}), analysis, limits=limits)
        got[columns] = (result, analysis.columns, capsys.readouterr().err)
    (auto, now, log), (every, _, every_log) = got["auto"], got["all"]
    assert [r["failure"] for r in auto["records"]] == [None, None]
    assert auto["output"] == every["output"] and auto["output"]["muons"] > 0
    assert [r["events"] for r in auto["records"]] == [r["events"] for r in every["records"]]
    assert now == "all"  # the job's files after the first made with every field
    (line,) = [line for line in log.splitlines() if "run again with every field" in line]
    assert "ttH_M125_2017.root" in line and "events.Muon.pt" in line and "counting.py:11" in line, line
    assert "set config columns: all" in line and "run again" not in every_log
    first = auto["records"][0]  # its time counts both runs, from the first's start
    assert first["wall_seconds"] > 0.8 * (first["end"] - first["start"]), first
    assert first["cpu_seconds"] > 1.3 * every["records"][0]["cpu_seconds"], first  # the first run's CPU too
    assert "events.Muon.pt" in first["rerun"] and [r["rerun"] for r in every["records"]] == [None, None]
    assert auto["records"][1]["rerun"] is None


@pytest.mark.slow  # (make test's; make check runs the per-file-process case above)
def test_columns_auto_runs_again_a_file_whose_analysis_caught_or_returned_a_field_not_made(tmp_path):
    """A NotRead the analysis caught, a placeholder it returned: with columns: auto (in the job's own process here)
    the file runs again with every field, its output what columns: all gives."""
    (tmp_path / "caught.py").write_text(CAUGHT)
    (tmp_path / "returns.py").write_text(RETURNS)
    batch = one_batch("ttH_M125_2017.root")

    def outputs(name: str, chunksize: int) -> tuple:
        got = []
        for columns in ("auto", "all"):
            analysis = processor.load(f"{tmp_path}/{name}", chunksize=chunksize, columns=columns)
            result = driver.run_batch(index.shard(batch, {}), analysis)
            assert [r["failure"] for r in result["records"]] == [None] and analysis.columns == "all"
            got.append(result["output"])
        return tuple(got)

    caught, every = outputs("caught.py:f", CHUNKSIZE)
    assert caught == every and caught["muons"] > 0
    first, every = outputs("returns.py:first", 10**9)  # (one chunk: coffea cannot add arrays of events)
    assert first["jets"] == every["jets"] and first["first"].fields == every["first"].fields
    assert str(first["first"].type) == str(every["first"].type)  # (lazy: its file is closed)
