"""Outputs that hold instances of the analysis's own classes: a merge job imports the analysis's module before it
reads them (``--analysis``), and the main process's readers of counts (progress, ``hepvine compare``) read them
without it (``merge.read_counts``: a placeholder for what cannot be imported); what needs only the records reads
them without the output (``merge.read_records``)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from hepvine.jobs import merge
from hepvine.model import atomic

ANALYSIS = """
class Tally:
    def __init__(self, n=0):
        self.n = n

    def __add__(self, other):
        return Tally(self.n + other.n)


def analysis(events):
    return {"tally": Tally(len(events))}
"""


def batch_results(tmp_path):
    """Two batch results as the driver pickles them, written by another process that loaded the analysis file."""
    (tmp_path / "mine.py").write_text(ANALYSIS)
    code = (
        "import sys; from hepvine.work import processor; from hepvine.jobs import merge\n"
        f"a = processor.load('{tmp_path}/mine.py:analysis')\n"
        "for i in (1, 2):\n"
        "    record = {'failure': None, 'events': 10 * i}\n"
        "    out = a.process([0] * (10 * i))\n"
        f"    merge.write(sys.argv[1] + f'/b{{i}}.pkl', "
        "{'records': [record], 'output': out, 'events': {'d': 10 * i}})\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    return [tmp_path / "b1.pkl", tmp_path / "b2.pkl"]


def test_a_merge_imports_the_analysis_module_before_it_reads_the_outputs(tmp_path):
    inputs = batch_results(tmp_path)
    out = tmp_path / "merged.pkl"
    without = subprocess.run(
        [sys.executable, "-m", "hepvine.jobs.merge", "--output", str(out), *map(str, inputs)],
        capture_output=True,
        text=True,
    )
    assert without.returncode != 0 and "No module named 'hepvine_analysis_mine'" in without.stderr
    done = subprocess.run(
        [sys.executable, "-m", "hepvine.jobs.merge", "--analysis", f"{tmp_path}/mine.py:analysis", "--output", str(out)]
        + list(map(str, inputs)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    check = (
        "from hepvine.jobs import merge; from hepvine.work import processor\n"
        f"processor.make_importable('{tmp_path}/mine.py:analysis')\n"
        f"r = merge.load({str(out)!r})\n"
        "print(r['output']['tally'].n, r['events'])"
    )
    said = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    assert said == "30 {'d': 30}\n"


def test_counts_are_read_without_the_analysis(tmp_path, monkeypatch):
    first, _ = batch_results(tmp_path)
    # As in the main process, which never imports the analysis (a test before this one in the process may have).
    monkeypatch.delitem(sys.modules, "hepvine_analysis_mine", raising=False)
    result = merge.read_counts(first)
    assert result["records"] == [{"failure": None, "events": 10}] and result["events"] == {"d": 10}
    assert type(result["output"]["tally"]).__name__ == "_Unknown"
    plain = tmp_path / "plain.pkl"  # a result of one pickle (an hepvine before 2026-11-27): read whole
    atomic.write_pickle(plain, {"records": [], "output": {"n": 1}, "events": {}})
    assert merge.read_counts(plain) == merge.read_records(plain) == pickle.loads(plain.read_bytes())


class Unreadable:
    """An output that cannot be read back (as one whose module is gone, or that is huge)."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise AssertionError("the output was read")


def test_records_are_read_without_reading_the_output(tmp_path):
    """What reads only the records (the progress; the retries of a run that ended in an error) never unpickles the
    output; a result from before analyses were plug-ins gives its records, and its output is refused with the fix."""
    path = tmp_path / "r.pkl"
    merge.write(path, {"records": [{"fid": "a/b/0", "failure": None}], "output": Unreadable(), "events": {"a": 3}})
    assert merge.read_records(path) == {"records": [{"fid": "a/b/0", "failure": None}], "events": {"a": 3}}
    with pytest.raises(AssertionError, match="the output was read"):
        merge.load(path)
    old = tmp_path / "old.pkl"  # from before analyses were plug-ins: its records are read, its output refused
    atomic.write_pickle(old, {"records": [{"fid": "a/b/1"}], "hist": None, "events": {"a": 1}, "variations": {}})
    assert merge.read_records(old)["records"] == [{"fid": "a/b/1"}]
    with pytest.raises(merge.OldResult, match="--forcerun analyse"):
        merge.load(old)


class Counted:
    """An output that counts its live instances (and the most alive at once)."""

    live = peak = 0

    def __init__(self, n):
        self.n = n
        Counted.live += 1
        Counted.peak = max(Counted.peak, Counted.live)

    def __del__(self):
        Counted.live -= 1

    def __add__(self, other):
        return Counted(self.n + other.n)


def test_a_merge_holds_a_few_outputs_at_a_time_whatever_its_fan_in():
    """A merge node's inputs are read one at a time as it adds them (the root merge of a small campaign runs on the
    login node): 64 inputs, at most 4 outputs alive at once (the sum, the new sum, the input being added, the next
    read), and every record and count kept."""
    Counted.live = Counted.peak = 0

    def results():
        for i in range(64):
            yield {"records": [{"fid": i}], "output": {"tally": Counted(1)}, "events": {"d": 10}}

    merged = merge.merge(results())
    assert merged["output"]["tally"].n == 64 and merged["events"] == {"d": 640}
    assert [r["fid"] for r in merged["records"]] == list(range(64))
    assert Counted.peak <= 4, Counted.peak
