"""The user's analysis as a plug-in (``hepvine.work.processor``), checked against coffea itself: chunks cut with
coffea's own arithmetic; a processor hepvine has never seen, over a coffea fileset of real NanoAOD (Run 2 and 3, MC and
data, TTree and RNTuple, a DAS name with slashes), gives ``output.coffea`` equal to coffea's ``processor.Runner`` on the
same files, while a file coffea cannot read is named as failed; an exception in the user's ``process`` is that
file's ``analysis-error`` naming the user's line, and fixing the file reruns the jobs and completes."""

from __future__ import annotations

import contextlib
import json
import pickle
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import uproot
from coffea import processor as coffea_processor
from coffea import util
from processors import CHUNKSIZE, NEW_PROCESSOR, assert_same, coffea_runner, fileset_in, runner_chunk

from hepvine.model import dataset, sources
from hepvine.reading import failures
from hepvine.work import nanoevents, processor

NANOAOD = Path(__file__).resolve().parents[3] / "shared" / "nanoaod"
DAS = "/TTHtoGG_M125/RunIIFall17NanoAODv7-PU2017_12Apr2018/NANOAODSIM"
# Run 2 MC (LZMA), Run 3 MC v13, RNTuple, NanoAOD v15, Run 2 and Run 3 collision data.
FILESET = {
    DAS: {"files": {"ttH_M125_2017.root": "Events"}, "metadata": {"xsec": 0.5, "kind": "mc"}},
    "run3_mc": {
        "files": {"ggH_M125_amcatnlo_v13.root": "Events", "nano_tt_v15.root": "Events"},
        "metadata": {"kind": "mc"},
    },
    "rntuple": {"files": {"nano_dy_rntuple.root": "Events"}},
    "data": ["nano_dimuon.root", "EGamma_F_Skim.root"],
}


@pytest.mark.parametrize("n", [0, 1, 29, 30, 31, 44, 45, 46, 100, 1000, 1001, 12345])
@pytest.mark.parametrize("chunksize", [1, 7, 30, 100_000])
def test_chunks_are_coffeas(n, chunksize):
    meta = coffea_processor.executor.FileMeta("d", "f.root", "Events", {"numentries": n, "uuid": b""})
    theirs = [(item.entrystart, item.entrystop) for item in meta.chunks(chunksize, False)]
    assert processor.chunks(n, chunksize) == theirs


def test_analysis_spec_errors_say_what_to_change(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("class NotAProcessor:\n    pass\n\nvalue = 3\n")
    (tmp_path / "needs.py").write_text("import no_such_helper_hv\n\ndef f(events):\n    return {}\n")
    (tmp_path / "pkg_hv").mkdir()
    (tmp_path / "pkg_hv" / "__init__.py").write_text("")
    (tmp_path / "pkg_hv" / "proc.py").write_text("import no_such_dependency_hv\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = {
        "nocolon": "name it as <file.py>:<Name>",
        f"{tmp_path}/missing.py:X": "no such file",
        f"{tmp_path}/mine.py:Nope": "defines no 'Nope'",
        f"{tmp_path}/mine.py:NotAProcessor": "not a coffea.processor.ProcessorABC",
        f"{tmp_path}/mine.py:value": "neither a processor class nor a function",
        "no_such_module_hv:Name": "cannot import no_such_module_hv",
        "pkg_hv.no_such_hv:Name": "cannot import pkg_hv.no_such_hv",
        # a module of the user's that imports what is not there: named, not the analysis
        f"{tmp_path}/needs.py:f": f"{tmp_path}/needs.py imports 'no_such_helper_hv', which cannot be imported here",
        "pkg_hv.proc:Name": "pkg_hv.proc imports 'no_such_dependency_hv', which cannot be imported here",
    }
    for spec, words in cases.items():
        with pytest.raises(processor.AnalysisSpecError, match=words.replace(".", r"\.").replace("(", r"\(")):
            processor.load(spec)
    (tmp_path / "f.py").write_text("def f(events):\n    return {}\n")
    assert processor.load(f"{tmp_path}/f.py:f").process(None) == {}
    with pytest.raises(processor.AnalysisSpecError, match="takes no analysis_args"):
        processor.load(f"{tmp_path}/f.py:f", {"x": 1})
    with pytest.raises(processor.AnalysisSpecError, match="correct analysis_args"):
        processor.load("hepvine.examples.agc:TtbarProcessor", {"no_such_argument": 1})
    with pytest.raises(processor.AnalysisSpecError, match="not a NanoEvents schema"):
        processor.load("hepvine.examples.agc:TtbarProcessor", schema="NoSuchSchema")


@pytest.fixture(scope="module")
def new_campaign(tmp_path_factory):
    """A workflow directory with the new processor's file, a fileset of every kind of real file above (by absolute
    path) plus a file that is not ROOT (in DAS's dataset), and the campaign run there with the local executor."""
    import subprocess
    import sys

    work = tmp_path_factory.mktemp("new-processor")
    (work / "my_analysis.py").write_text(NEW_PROCESSOR)
    doc = fileset_in(NANOAOD, FILESET)
    bad = work / "not_root.root"
    bad.write_bytes(b"this is not a ROOT file" * 100)
    doc[DAS]["files"][str(bad)] = "Events"
    (work / "fileset.json").write_text(json.dumps(doc))
    repo = Path(__file__).resolve().parents[2]
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(repo / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "2",
        "--config",
        "dataset=fileset.json",
        "analysis=my_analysis.py:JetsAndMuons",
        "analysis_args={pt_min: 25.0}",
        f"chunksize={CHUNKSIZE}",
        "campaign=new",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return work, doc, bad, cmd, run


def test_a_new_processor_over_a_fileset_equals_coffeas_runner(new_campaign):
    import subprocess

    work, doc, bad, cmd, run = new_campaign
    assert run.returncode == 0, run.stderr[-3000:]
    out = work / "results" / "new"
    report = json.loads((out / "report.json").read_text())
    # The file coffea cannot read is named, with its class; every other file is counted once.
    assert report["files"] == {"total": 7, "ok": 6, "failed": 1} and report["complete"] is False
    (failed,) = report["failed_files"]
    assert failed["path"] == str(bad) and failed["kind"] == "not-root" and failed["class"] == "permanent"
    assert report["accounting"]["missing"] == report["accounting"]["duplicated"] == []
    # coffea's Runner over the same fileset without the bad file.
    good = json.loads(json.dumps(doc))
    del good[DAS]["files"][str(bad)]
    theirs = coffea_runner(
        good, processor.load(str(work / "my_analysis.py") + ":JetsAndMuons", {"pt_min": 25.0}).instance
    )
    ours = util.load(str(out / "output.coffea"))
    assert_same(ours, theirs)
    assert ours["datasets"] == sorted(FILESET)  # postprocess ran once, on the merged output
    assert ours[DAS]["events"] == 100 and ours["rntuple"]["events"] == 40
    assert {kind for *_, kind in ours["run3_mc"]["chunks"]} == {"mc"}  # the dataset's metadata reached the events
    # Every histogram ROOT can hold is in histograms.root under its path; the category one is listed as skipped.
    safe = "_TTHtoGG_M125_RunIIFall17NanoAODv7-PU2017_12Apr2018_NANOAODSIM"
    with uproot.open(out / "histograms.root") as f:
        np.testing.assert_array_equal(f[f"{safe}/jet_pt"].values(), theirs[DAS]["jet_pt"].values())
        np.testing.assert_array_equal(f["rntuple/jet_etaphi"].values(), theirs["rntuple"]["jet_etaphi"].values())
    assert "njets" in report["histograms"]["skipped"] and f"{safe}/jet_pt" in report["histograms"]["written"]
    assert report["events_per_dataset"] == {k: v["events"] for k, v in theirs.items() if isinstance(v, dict)}
    plots = sorted(p.name for p in (out / "plots").iterdir())
    assert "timeline.png" in plots and f"{safe.lstrip('_')}__jet_pt.png" in plots and "njets.png" in plots
    assert report["provenance"]["sha256"]["analysis"] is not None
    # Every file's record names the version of the analysis its job ran: one, the file's as it is.
    with contextlib.chdir(work):
        version = sources.version("my_analysis.py:JetsAndMuons")
    assert report["analysis_versions"] == {version: 7} and {r["analysis"] for r in report["inputs"]} == {version}
    # Snakemake's HTML report links every plot, those of the DAS key's histograms too, without a docutils warning
    # (a file name beginning with '_' was a "malformed hyperlink target").
    html = subprocess.run([*cmd, "--report", str(work / "report.html")], capture_output=True, text=True, timeout=600)
    assert html.returncode == 0, html.stderr[-3000:]
    assert "malformed" not in html.stderr and "WARNING/2" not in html.stderr, html.stderr[-3000:]
    page = (work / "report.html").read_text()
    assert all(name in page for name in plots if name.endswith(".png"))


def test_an_exception_in_process_is_that_files_analysis_error_and_the_fix_reruns(new_campaign):
    import subprocess
    import sys

    work, doc, bad, cmd, _ = new_campaign
    del doc[DAS]["files"][str(bad)]
    (work / "fileset.json").write_text(json.dumps(doc))
    breaking = [*cmd[:-1], "campaign=broken", "analysis_args={pt_min: 25.0, fail_on: nano_tt_v15.root}"]
    run = subprocess.run(breaking, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((work / "results" / "broken" / "report.json").read_text())
    assert report["files"] == {"total": 6, "ok": 5, "failed": 1} and not report["complete"]
    (failed,) = report["failed_files"]
    assert failed["kind"] == "analysis-error" and failed["path"].endswith("nano_tt_v15.root")
    line = NEW_PROCESSOR.splitlines().index('            raise RuntimeError("this file breaks my analysis")') + 1
    assert f"my_analysis.py:{line} in process" in failed["error"], failed["error"]
    assert "this file breaks my analysis" in failed["error"] and "fix it there" in failed["fix"]
    # The fix: other arguments. The same command with them reruns the jobs and the campaign completes.
    fixed = subprocess.run([*cmd[:-1], "campaign=broken"], capture_output=True, text=True, timeout=600)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    report = json.loads((work / "results" / "broken" / "report.json").read_text())
    assert report["complete"] and report["files"]["ok"] == 6
    processor.make_importable(str(work / "my_analysis.py") + ":JetsAndMuons")  # its Tally, whatever ran before
    fixed_output = util.load(str(work / "results" / "broken" / "output.coffea"))
    # Unchanged: nothing to do. A changed analysis file: the analysis jobs run again.
    dry = subprocess.run([*cmd[:-1], "campaign=broken", "-n"], capture_output=True, text=True, timeout=600)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    (work / "my_analysis.py").write_text(NEW_PROCESSOR + "\n# changed\n")
    dry = subprocess.run([*cmd[:-1], "campaign=broken", "-n"], capture_output=True, text=True, timeout=600)
    assert "analyse" in dry.stdout and "reason: Updated input files: my_analysis.py" in dry.stdout, dry.stdout

    # The same processor in a package of the working directory, named <module>:<Name>: the same output; the
    # package's files are the jobs' inputs (hepvine.model.sources), so a change of a module it imports reruns them.
    (work / "mypkg").mkdir()
    (work / "mypkg" / "__init__.py").write_text("")
    (work / "mypkg" / "proc.py").write_text("from mypkg.helpers import unused  # noqa: F401\n" + NEW_PROCESSOR)
    (work / "mypkg" / "helpers.py").write_text("unused = 1\n")
    as_module = [c.replace("my_analysis.py:", "mypkg.proc:") for c in cmd[:-1]] + ["campaign=pkg"]
    run = subprocess.run(as_module, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    sys.path.insert(0, str(work))  # its Tally is mypkg.proc.Tally: importable from the working directory
    try:
        assert_same(util.load(str(work / "results" / "pkg" / "output.coffea")), fixed_output)
    finally:
        sys.path.remove(str(work))
    (work / "mypkg" / "helpers.py").write_text("unused = 2\n")
    dry = subprocess.run([*as_module, "-n"], capture_output=True, text=True, timeout=600)
    assert "reason: Updated input files: mypkg/helpers.py" in dry.stdout, dry.stdout


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["auto", "all"])
def test_the_dimuon_example_on_every_file_with_muons_equals_coffeas_runner(columns):
    """hepvine.examples.dimuon over the real files (TTree and RNTuple, Run 2 and 3, MC and data), file by file as a
    job runs it, accumulated: equal to coffea's Runner over the same fileset, with chunks cut to what it reads (the
    default) and with every field."""
    from coffea.processor import accumulate

    from hepvine.model.dataset import FileTask

    doc = fileset_in(
        NANOAOD,
        {
            "mc": ["nano_dy.root", "nano_dy_rntuple.root", "ttH_M125_2017.root", "nano_tt_v15.root"],
            "data": ["nano_dimuon.root", "DYto2E.root", "EGamma_F_Skim.root"],
        },
    )
    chunksize = 10 * CHUNKSIZE  # still several chunks in most files; each chunk costs both sides ~0.1 s
    analysis = processor.load("hepvine.examples.dimuon:DimuonProcessor", chunksize=chunksize, columns=columns)
    ours = None
    for key, paths in doc.items():
        for i, path in enumerate(paths):
            task = FileTask(
                fid=f"{key}/files/{i}",
                process=key,
                variation="files",
                index=i,
                path=path,
                nevts=None,
                nevts_total=None,
                xsec=None,
                dataset=key,
            )
            output, events, _ = processor.run_file(path, task, analysis)
            assert events == uproot.open(path)["Events"].num_entries
            ours = output if ours is None else accumulate([output], ours)
    theirs = coffea_runner(doc, processor.load("hepvine.examples.dimuon:DimuonProcessor").instance, chunksize)
    assert_same(analysis.postprocess(ours), theirs)
    assert ours["data"]["pairs"] > 0 and ours["mc"]["pairs"] > 0  # a spectrum, not two empty histograms


# Refuses to run on an empty chunk: every way coffea traces fails, so its chunks are read lazily.
UNTRACEABLE = """
def f(events):
    if events.metadata["entrystop"] == events.metadata["entrystart"]:
        raise RuntimeError("not on an empty chunk")
    return {"n": len(events)}
"""


@pytest.fixture
def served(services):
    """The URL of a real NanoAOD file (ttH, Run 2) served by the sandbox's XRootD origin, under a fresh directory
    removed after."""
    origin = services["xrootd"]["origin"]
    tag = f"test-preload-{uuid.uuid4().hex[:8]}"
    store = Path(origin["data_dir"]) / "store" / tag
    store.mkdir(parents=True)
    shutil.copy(NANOAOD / "ttH_M125_2017.root", store / "ttH.root")
    yield f"{origin['url']}//store/{tag}/ttH.root"
    shutil.rmtree(store)


@pytest.fixture
def derived(monkeypatch) -> list:
    """The trees whose base form coffea's ``UprootSourceMapping._extract_base_form`` derives during the test, in
    order (it still derives them)."""
    from coffea.nanoevents.mapping import UprootSourceMapping

    trees = []
    extract = UprootSourceMapping._extract_base_form.__func__
    monkeypatch.setattr(
        UprootSourceMapping,
        "_extract_base_form",
        classmethod(lambda cls, tree, **kw: trees.append(tree) or extract(cls, tree, **kw)),
    )
    return trees


def test_the_branches_an_analysis_reads_over_xrootd_are_traced_once_and_preloaded_without_changing_its_output(
    tmp_path, served, derived
):
    (tmp_path / "mine.py").write_text(NEW_PROCESSOR)
    (tmp_path / "untraceable.py").write_text(UNTRACEABLE)
    path = served
    task = next(t for t in dataset.tasks({DAS: {"files": {path: "Events"}}}) if t.path == path)
    traced = processor.load(f"{tmp_path}/mine.py:JetsAndMuons", {"pt_min": 25.0}, chunksize=CHUNKSIZE)
    ours, events, _ = processor.run_file(path, task, traced)
    assert len(derived) == 1  # the trace's empty chunk and the file's chunks share one base form
    [(key, columns)] = traced.traced.items()  # (dataset, tree, layout)
    with uproot.open(path) as opened:
        assert key[:2] == (task.dataset, "Events") and key[2] == nanoevents.layout_key(opened["Events"]) is not None
    assert {"nJet", "Jet_pt", "Jet_eta", "Jet_phi", "nMuon"} <= columns and len(columns) < 20, columns
    lazy = processor.load(f"{tmp_path}/mine.py:JetsAndMuons", {"pt_min": 25.0}, chunksize=CHUNKSIZE)
    lazy.traced[key] = None  # as if the trace had failed: every column read as touched
    theirs, lazy_events, _ = processor.run_file(path, task, lazy)
    assert events == lazy_events > CHUNKSIZE  # several chunks, each preloaded
    assert_same(ours, theirs)
    untraceable = processor.load(f"{tmp_path}/untraceable.py:f", chunksize=CHUNKSIZE)
    out, n, _ = processor.run_file(path, task, untraceable)
    assert untraceable.traced == {key: None} and out["n"] == n == events


def test_a_local_file_is_read_lazily_untraced_with_the_same_output(tmp_path, monkeypatch):
    """With config columns: all a local file is not traced (nothing to preload): its columns are read lazily. A path
    is read through uproot's threaded file source, a ``file://`` URL through its default (fsspec): the same output
    from the same bytes."""
    (tmp_path / "mine.py").write_text(NEW_PROCESSOR)
    path = str(NANOAOD / "ttH_M125_2017.root")
    task = next(t for t in dataset.tasks({DAS: {"files": {path: "Events"}}}) if t.path == path)
    local = processor.load(f"{tmp_path}/mine.py:JetsAndMuons", {"pt_min": 25.0}, chunksize=CHUNKSIZE, columns="all")
    opened_with, real_open = [], uproot.open

    def recording_open(*args, **kwargs):  # uproot's own open, the source it was given recorded
        opened_with.append(kwargs.get("handler"))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(uproot, "open", recording_open)
    ours, events, read = processor.run_file(path, task, local)
    assert local.traced == {}, "a local file was traced"
    lazy = processor.load(f"{tmp_path}/mine.py:JetsAndMuons", {"pt_min": 25.0}, chunksize=CHUNKSIZE, columns="all")
    theirs, lazy_events, lazy_read = processor.run_file(f"file://{path}", task, lazy)
    assert lazy.traced == {}
    assert events == lazy_events > CHUNKSIZE and read == lazy_read > 0
    assert_same(ours, theirs)
    assert opened_with == [uproot.source.file.MultithreadedFileSource, None]
    with pytest.raises(FileNotFoundError, match=r"^\[Errno 2\] No such file or directory: '.*gone\.root'$"):
        processor.run_file(str(tmp_path / "gone.root"), task, local)  # as the OS says it
    names = (f"file://{path}", f"file:{path}", "~/f.root", "root://h//f", "https://h/f")
    assert [processor.local_source(u) for u in names] == [None] * len(names)
    assert [processor.over_network(u) for u in (path, f"file://{path}", "root://h//f", "HTTPS://h/f")] == [
        False,
        False,
        True,
        True,
    ]


READS_MUONS = "def f(events):\n    return {'n': len(events.Muon.pt)}\n"


@pytest.mark.parametrize(
    "analysis, read_fails, kind",
    [
        ("def f(events):\n    open('corrections/sf.json')\n    return {}\n", None, "analysis-error"),
        ("import uproot\n\ndef f(events):\n    raise uproot.KeyInFileError('sf')\n", None, "analysis-error"),
        (READS_MUONS, ConnectionResetError(104, "reset by peer"), "unreachable"),
        (READS_MUONS, uproot.KeyInFileError("Muon_pt"), "missing-branch"),
    ],
    ids=["own-file-missing", "own-key-missing", "read-reset", "read-missing-branch"],
)
def test_a_read_failure_under_a_column_is_the_files_and_the_analysis_own_is_its_error(
    tmp_path, monkeypatch, analysis, read_fails, kind
):
    """An error of a class that means a read failure (an OSError, uproot's KeyInFileError) raised while NanoEvents
    reads a column the analysis touches is the file's, classified as such; raised by the analysis's own code (a
    corrections file it cannot open) it is the analysis's error, naming its line — not the data file's
    missing-file, which would send the job to the file's other sources."""
    (tmp_path / "mine.py").write_text(analysis)
    path = str(NANOAOD / "nano_dimuon.root")
    (task,) = dataset.tasks({"d": {"files": {path: "Events"}}})
    if read_fails is not None:

        def failing_read(branch, *args, **kwargs):  # where uproot raises: under coffea's mapping of the file
            raise read_fails

        monkeypatch.setattr(uproot.behaviors.TBranch.TBranch, "array", failing_read)
    with pytest.raises(Exception) as raised:
        processor.run_file(path, task, processor.load(f"{tmp_path}/mine.py:f", chunksize=CHUNKSIZE))
    failure = failures.classify(raised.value)
    assert failure is not None and failure.kind == kind, (failure, raised.value)
    if kind == "analysis-error":
        line = analysis.splitlines().index(next(x for x in analysis.splitlines() if "sf" in x)) + 1
        assert f"mine.py:{line} in f" in failure.fix, failure.fix
    else:
        assert raised.value is read_fails


def test_a_step_past_the_files_end_counts_the_events_the_file_has(tmp_path):
    """A preprocessed step may end past the file's last entry (a fileset without num_entries): its chunk holds what
    the file has, its metadata gives the step as written (as the Runner's), and the file counts the events it has."""
    (tmp_path / "count.py").write_text(
        "def f(events):\n    return {'n': len(events), 'stops': {events.metadata['entrystop']}}\n"
    )
    path = str(NANOAOD / "nano_dimuon.root")
    n = uproot.open(path)["Events"].num_entries
    steps = [[0, n - 10], [n - 10, n + 50]]
    (task,) = dataset.tasks({"d": {"files": {path: {"object_path": "Events", "steps": steps}}}})
    out, events, _ = processor.run_file(path, task, processor.load(f"{tmp_path}/count.py:f", chunksize=CHUNKSIZE))
    assert n > 10 and events == out["n"] == n and out["stops"] == {n - 10, n + 50}


@pytest.mark.parametrize(
    "name, schema, preload",
    [
        ("ttH_M125_2017.root", "NanoAODSchema", frozenset({"event", "nMuon", "Muon_pt"})),
        ("nano_dimuon.root", "BaseSchema", frozenset({"event", "nMuon", "Muon_pt"})),  # Run 2 data
        ("nano_dy_rntuple.root", "NanoAODSchema", frozenset({"event", "nMuon", "Muon_pt"})),
    ],
)
def test_a_files_chunks_share_its_base_form_and_are_what_coffeas_from_root_makes(name, schema, preload, derived):
    """``FileChunks`` derives a file's base form once and builds each chunk from a copy of it: every chunk is what
    coffea's ``from_root`` makes (the same form, metadata, partition, attributes and columns), with branches preloaded
    and without, TTree and RNTuple."""
    import awkward as ak

    path, schemaclass = str(NANOAOD / name), processor.schema_class(schema)
    with uproot.open(path) as f:
        made = nanoevents.FileChunks(f, "Events", schemaclass)
        steps = processor.chunks(made.tree.num_entries, 15)  # the files hold 40 to 100 events
        assert len(steps) > 1
        for loaded in {preload, None}:
            for start, stop in steps:
                metadata = {"dataset": "d", "filename": path, "entrystart": start, "entrystop": stop, "kind": "mc"}
                ours = made.events(dict(metadata), start, stop, loaded)
                theirs = runner_chunk(f, schemaclass, dict(metadata), start, stop, loaded)
                assert ours.layout.form == theirs.layout.form and ours.metadata == theirs.metadata
                assert ours.attrs.keys() == theirs.attrs.keys() and ours.attrs["@form"] == theirs.attrs["@form"]
                factories = ours.attrs["@events_factory"], theirs.attrs["@events_factory"]
                assert factories[0]._partition_key == factories[1]._partition_key
                assert factories[0].file_handle is factories[1].file_handle is f
                preloaded = [set(x._mapping.preloaded_arrays or ()) for x in factories]
                if loaded:
                    assert preloaded[0] == preloaded[1] >= loaded  # an RNTuple's come with their collection
                else:  # the counts of what the file's chunks before read: taken from the branches they count
                    assert preloaded[1] == set() and preloaded[0] <= {"nMuon", "Muon_pt"}
                muon_pt = (lambda e: e.Muon.pt) if schema == "NanoAODSchema" else (lambda e: e.Muon_pt)
                assert len(ours) == stop - start and ak.array_equal(ours.event, theirs.event)
                assert ak.array_equal(muon_pt(ours), muon_pt(theirs))
    assert len(derived) == 1 + len({preload, None}) * len(steps)  # ours once for the file, from_root's every chunk


@pytest.fixture(scope="module")
def tth_copy(tmp_path_factory) -> Path:
    """The ttH file recompressed to ZSTD by ROOT (hepvine.work.recompress): a file of the same layout, other bytes."""
    from hepvine.work import recompress

    copy = tmp_path_factory.mktemp("copy") / "ttH-zstd.root"
    recompress.recompress(str(NANOAOD / "ttH_M125_2017.root"), copy, recompress.parse_codec("zstd:5"))
    return copy


def base_form(tree) -> dict:
    from coffea.nanoevents.mapping import UprootSourceMapping

    return {**UprootSourceMapping._extract_base_form(tree), "typenames": tree.typenames()}


def test_trees_of_one_layout_share_a_key_and_their_base_form_and_trees_of_others_do_not(tth_copy, tmp_path):
    """``layout_key``: every real NanoAOD TTree has one (RNTuples none); a file and ROOT's copy of it share the key and
    the base form; the real files' keys all differ (their forms do); a branch of another type changes the key."""
    keys, forms = {}, {}
    for path in [*sorted(NANOAOD.glob("*.root")), tth_copy]:
        with uproot.open(path) as f:
            keys[path.name] = nanoevents.layout_key(f["Events"])
            if keys[path.name] is not None:
                forms[path.name] = base_form(f["Events"])
    assert {name for name, key in keys.items() if key is None} == {n for n in keys if "rntuple" in n.lower()}
    assert keys["ttH-zstd.root"] == keys["ttH_M125_2017.root"] and forms["ttH-zstd.root"] == forms["ttH_M125_2017.root"]
    real = [name for name in forms if name != "ttH-zstd.root"]
    assert (
        len({keys[name] for name in real})
        == len({json.dumps(forms[name], sort_keys=True) for name in real})
        == len(real)
    )

    written = {}
    trees = {"a": ("float32", ""), "b": ("float32", ""), "c": ("float64", ""), "d": ("float32", "Events of 2026")}
    trees.update(e=("int32", ""), f=("uint32", ""))  # signed and unsigned: one leaf class (TLeafI)
    for name, (kind, title) in trees.items():
        with uproot.recreate(tmp_path / f"{name}.root") as f:
            jets = ak_jets(kind, seed=len(written))
            f.mktree("Events", {"Jet": jets.type}, title=title)  # a TTree (assigning a dict writes an RNTuple)
            f["Events"].extend({"Jet": jets})
        with uproot.open(tmp_path / f"{name}.root") as f:
            written[name] = (nanoevents.layout_key(f["Events"]), base_form(f["Events"]))
    assert written["a"] == written["b"]  # other values, one layout
    for a, b in (("a", "c"), ("a", "d"), ("e", "f")):  # another type, tree title, signedness: another key and form
        assert written[a][0] != written[b][0] and written[a][1] != written[b][1], (a, b)


def ak_jets(kind: str, seed: int):
    import awkward as ak

    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 5, 20)
    return ak.zip({"pt": ak.unflatten(rng.random(counts.sum()).astype(kind), counts)})


def test_a_files_after_the_first_of_a_layout_derive_no_base_form_and_make_what_from_root_makes(tth_copy, derived):
    """With a job's forms (``Analysis.forms``), the second file of a layout takes the first's base form: one derivation
    for the two, and the second file's chunks are what ``from_root`` makes of it; a file of another layout derives
    its own."""
    import awkward as ak
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    forms, paths = {}, (NANOAOD / "ttH_M125_2017.root", tth_copy, NANOAOD / "nano_dy.root")
    for path in paths:
        with uproot.open(path) as f:
            events = nanoevents.FileChunks(f, "Events", NanoAODSchema, forms).events({"dataset": "d"}, 5, 40, None)
            assert len(events) == 35
    assert [Path(t.file.file_path).name for t in derived] == ["ttH_M125_2017.root", "nano_dy.root"]  # not the copy
    for path in paths:
        with uproot.open(path) as f:
            ours = nanoevents.FileChunks(f, "Events", NanoAODSchema, forms).events({"dataset": "d"}, 5, 40, None)
            theirs = NanoEventsFactory.from_root(
                file=f,
                treepath="Events",
                schemaclass=NanoAODSchema,
                metadata={"dataset": "d"},
                mode="virtual",
                entry_start=5,
                entry_stop=40,
            ).events()
            assert ours.layout.form == theirs.layout.form and ak.array_equal(ours.Jet.pt, theirs.Jet.pt)
    assert len(forms) == 4  # a base form and the schema's form of it (schemaform) a layout


def test_a_coffea_whose_parts_take_other_arguments_gets_from_roots_chunks(monkeypatch):
    """``coffea_parts`` checks the signatures of the coffea parts ``FileChunks`` calls: one reshaped (as a later coffea
    might) makes every chunk ``from_root``'s, which are still the file's events, instead of failing every file."""
    import awkward as ak
    from coffea.nanoevents import NanoAODSchema, factory

    assert nanoevents.coffea_parts() is not None  # this coffea's parts fit

    class Reshaped:  # takes one argument where FileChunks gives two (from_root uses it only to preload)
        def __init__(self, array):
            raise AssertionError("called with the old arguments")

    monkeypatch.setattr(factory, "_OnlySliceableAs", Reshaped)
    made_by = []
    from_root = factory.NanoEventsFactory.from_root.__func__
    monkeypatch.setattr(
        factory.NanoEventsFactory,
        "from_root",
        classmethod(lambda cls, *args, **kw: made_by.append(kw["entry_stop"]) or from_root(cls, *args, **kw)),
    )
    nanoevents.coffea_parts.cache_clear()
    try:
        with pytest.warns(UserWarning, match="its _OnlySliceableAs takes other arguments.*NanoEventsFactory.from_root"):
            assert nanoevents.coffea_parts() is None
        with uproot.open(NANOAOD / "ttH_M125_2017.root") as f:
            made = nanoevents.FileChunks(f, "Events", NanoAODSchema, {})
            events = made.events({"dataset": "d"}, 0, 30, None)
            expected = f["Events"].arrays(["Muon_pt"], entry_stop=30)["Muon_pt"]
            assert ak.array_equal(events.Muon.pt, expected, check_parameters=False)
        assert made_by == [30]  # the chunk is from_root's
    finally:
        monkeypatch.undo()
        nanoevents.coffea_parts.cache_clear()
    assert nanoevents.coffea_parts() is not None


@pytest.mark.parametrize("forms", [None, {}], ids=["by-filter", "by-name"])
def test_a_preloaded_count_branch_is_taken_from_the_branch_it_counts_and_not_read(forms):
    """A count branch (``nMuon``) preloaded with a branch it counts (``Muon_pt``) is that branch's numbers of values
    per event, as uproot would read it (values, type, ``__doc__``), and its baskets are not read; one that counts no
    preloaded branch (``nElectron``) is read; a name the tree lacks is not. Both ways of reading the others: by a
    filter over every branch (``from_root``'s), and by name once the tree's branches are known to be plain (FORMS
    kept: ``layout_key``)."""
    import awkward as ak
    from coffea.nanoevents import NanoAODSchema

    path = NANOAOD / "ttH_M125_2017.root"
    preload = frozenset({"event", "nJet", "Jet_pt", "Jet_eta", "nMuon", "Muon_pt", "nElectron", "Absent_pt"})
    start, stop = 10, 60
    requested = _requested

    with uproot.open(path) as f:
        made = nanoevents.FileChunks(f, "Events", NanoAODSchema, forms)
        # (nJet's of Jet_pt, 2,372 compressed bytes, and Jet_eta, 3,053: the fewer)
        assert {count: of[0] for count, of in made._counted(preload).items()} == {"nJet": "Jet_pt", "nMuon": "Muon_pt"}
        chunk = []
        ours = requested(f, lambda: chunk.append(made.events({}, start, stop, preload)))
        loaded = chunk[0].attrs["@events_factory"]._mapping.preloaded_arrays
        by_name = ["Jet_eta", "Jet_pt", "Muon_pt", "event", "nElectron"]
        assert made._reads(preload)[0] == (None if forms is None else by_name)
        absent = made.events({}, start, stop, frozenset({"Absent_pt"}))  # a trace of another layout's file
        assert absent.attrs["@events_factory"]._mapping.preloaded_arrays == {} and len(absent.Muon.pt) == stop - start
    with uproot.open(path) as f:
        expected = f["Events"].arrays(
            filter_branch=lambda b: b.name in preload, entry_start=start, entry_stop=stop, ak_add_doc=True, how=dict
        )
    assert loaded.keys() == expected.keys() == preload - {"Absent_pt"}
    for name in expected:
        array = loaded[name][slice(start, stop)]
        assert array.layout.form == expected[name].layout.form and ak.array_equal(array, expected[name]), name
    assert ak.num(chunk[0].Muon.pt).to_list() == expected["nMuon"].to_list()

    def read_of(names):
        with uproot.open(path) as f:
            tree = f["Events"]
            return requested(
                f, lambda: tree.arrays(filter_branch=lambda b: b.name in names, entry_start=start, entry_stop=stop)
            )

    assert ours == read_of(preload - {"nJet", "nMuon"}) < read_of(preload)


def _requested(f, read) -> int:
    """The bytes READ() asks of the file F (opened by uproot)."""
    before = f.file.source.num_requested_bytes
    read()
    return f.file.source.num_requested_bytes - before


def _branches_bytes(path, names: list[str], start: int, stop: int) -> int:
    """The bytes uproot asks of the file at PATH to read its branches NAMES, entries START to STOP."""
    with uproot.open(path) as f:
        tree = f["Events"]
        return _requested(f, lambda: tree.arrays(names, entry_start=start, entry_stop=stop))


def test_a_lazy_chunks_traced_count_branch_is_taken_from_the_branch_it_counts_when_first_used():
    """A chunk read lazily whose analysis is known to read (READS: its trace) a count branch (``nMuon``) with a branch
    it counts (``Muon_pt``) takes the count from that branch when either is first used: the branch is read once for
    both, the count's baskets never; nothing is read before its use, a count of no read branch (``nElectron``) and
    the branches not in READS are read as the mapping reads them; the chunk's columns are what ``from_root`` gives."""
    import awkward as ak
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    path = NANOAOD / "ttH_M125_2017.root"
    reads = frozenset({"event", "nJet", "Jet_pt", "Jet_eta", "nMuon", "Muon_pt", "nElectron"})
    start, stop = 10, 60
    columns = {
        "Muon.pt": lambda e: e.Muon.pt,
        "Jet.eta": lambda e: e.Jet.eta,  # (read after nJet: Jet_pt's offsets, and Jet_eta)
        "Jet.pt": lambda e: e.Jet.pt,
        "nElectron": lambda e: ak.num(e.Electron, axis=1),
        "Electron.pt": lambda e: e.Electron.pt,
        "Tau.pt": lambda e: e.Tau.pt,
    }

    with uproot.open(path) as f:
        made = nanoevents.FileChunks(f, "Events", NanoAODSchema, {})
        made.events({}, start, stop, None)  # (the base form derived, the tree's branches looked up)
        chunk = []
        assert _requested(f, lambda: chunk.append(made.events({}, start, stop, None, reads))) == 0
        ours = chunk[0]
        assert isinstance(ours.attrs["@events_factory"]._mapping.preloaded_arrays, nanoevents._CountsOnUse)
        theirs = NanoEventsFactory.from_root(
            file=f, treepath="Events", schemaclass=NanoAODSchema, mode="virtual", entry_start=start, entry_stop=stop
        ).events()
        read = {name: _requested(f, lambda c=column: ak.materialize(c(ours))) for name, column in columns.items()}
        for name, column in columns.items():
            assert ak.array_equal(column(ours), column(theirs)), name
        assert ours.layout.form == theirs.layout.form

    def read_of(names: list[str]) -> int:
        return _branches_bytes(path, names, start, stop)

    assert read["Muon.pt"] == read_of(["Muon_pt"]) < read_of(["nMuon", "Muon_pt"])
    # nJet is taken from Jet_pt (of its branches in READS, the one of fewest compressed bytes), read once for both
    assert read["Jet.eta"] == read_of(["Jet_pt", "Jet_eta"]) and read["Jet.pt"] == 0
    assert read["nElectron"] == read_of(["nElectron"]) and read["Electron.pt"] == read_of(["Electron_pt"])
    assert read["Tau.pt"] == read_of(["nTau", "Tau_pt"])  # not in READS: as the mapping reads it


def test_a_lazy_chunk_takes_the_counts_of_branches_the_files_chunks_before_it_read():
    """Without a trace, a file's chunk takes a count branch (``nMuon``) from a branch it counts (``Muon_pt``) when the
    file's chunks before it read both: its first chunk reads both, the next only the branch; its columns are what
    ``from_root`` gives."""
    import awkward as ak
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    path = NANOAOD / "ttH_M125_2017.root"

    with uproot.open(path) as f:
        made = nanoevents.FileChunks(f, "Events", NanoAODSchema, {})
        read = []
        for start, stop in ((0, 30), (30, 60)):
            ours = made.events({}, start, stop, None)
            read.append(_requested(f, lambda chunk=ours: ak.materialize(chunk.Muon.pt)))
        theirs = NanoEventsFactory.from_root(
            file=f, treepath="Events", schemaclass=NanoAODSchema, mode="virtual", entry_start=30, entry_stop=60
        ).events()
        assert ak.array_equal(ours.Muon.pt, theirs.Muon.pt) and ak.array_equal(ak.num(ours.Muon), ak.num(theirs.Muon))
        assert ours.layout.form == theirs.layout.form
    assert read[0] == _branches_bytes(path, ["nMuon", "Muon_pt"], 0, 30)
    assert read[1] == _branches_bytes(path, ["Muon_pt"], 30, 60) < _branches_bytes(path, ["nMuon", "Muon_pt"], 30, 60)


def test_a_job_keeps_the_traces_and_forms_of_its_latest_datasets_and_layouts(tmp_path, monkeypatch):
    """A job keeps at most ``nanoevents.KEPT_FORMS`` traces (one a dataset, tree and layout), the most recently used:
    the least recently used is dropped, and a dataset met again after is traced again, with the same output."""
    (tmp_path / "mine.py").write_text(NEW_PROCESSOR)
    monkeypatch.setattr(nanoevents, "KEPT_FORMS", 3)
    path = str(NANOAOD / "ttH_M125_2017.root")
    analysis = processor.load(f"{tmp_path}/mine.py:JetsAndMuons", {"pt_min": 25.0}, chunksize=CHUNKSIZE)
    outputs = []
    for name in ("a", "b", "a", "c", "d", "b"):  # (a used again before c and d come: b is the oldest then)
        task = next(iter(dataset.tasks({name: {"files": {path: "Events"}}})))
        outputs.append(processor.run_file(path, task, analysis)[0])
    assert [key[0] for key in analysis.traced] == ["c", "d", "b"]
    assert all(read for read in analysis.traced.values())
    assert_same(outputs[1], outputs[-1])  # (b traced again)


def test_making_a_chunk_leaves_the_garbage_collector_as_it_found_it():
    """``FileChunks.events`` pauses the collector while it makes a chunk: on, it is on again after (a failure too);
    off, it stays off."""
    import gc

    from coffea.nanoevents.schemas import BaseSchema

    class Broken(BaseSchema):
        def __init__(self, base_form):
            raise RuntimeError("no such layout")

    class Seen(BaseSchema):
        collecting = []

        def __init__(self, base_form):
            Seen.collecting.append(gc.isenabled())
            super().__init__(base_form)

    with uproot.open(NANOAOD / "nano_dimuon.root") as f:
        with pytest.raises(RuntimeError, match="no such layout"):
            nanoevents.FileChunks(f, "Events", Broken).events({}, 0, 10, None)
        assert gc.isenabled()
        assert len(nanoevents.FileChunks(f, "Events", Seen).events({}, 0, 10, None)) == 10
        # paused while the chunk was made (the schema ran: schemaform.built checks it twice), on again after
        assert Seen.collecting == [False, False] and gc.isenabled()
        gc.disable()
        try:
            assert len(nanoevents.FileChunks(f, "Events", BaseSchema).events({}, 0, 10, None)) == 10
            assert not gc.isenabled()
        finally:
            gc.enable()


SETTLED = """
import gc, pickle, sys
from hepvine.model import dataset, sources
from hepvine.work import processor
path, out = sys.argv[1], sys.argv[2]
analysis = processor.load("hepvine.examples.dimuon:DimuonProcessor", chunksize=int(sys.argv[3]))
frozen = gc.get_freeze_count()
assert "coffea.nanoevents.methods.nanoaod" not in sys.modules
processor.settle(analysis)
assert gc.get_freeze_count() > frozen and "coffea.nanoevents.methods.nanoaod" in sys.modules
task = next(iter(dataset.tasks({"d": {"files": {path: "Events"}}})))
with open(out, "wb") as f:
    pickle.dump(processor.run_file(path, task, analysis)[:2], f)
"""


HELD = """
import weakref

import awkward as ak

seen = []  # each chunk's events, weakly


def f(events):
    seen.append(weakref.ref(events))
    return {"n": len(events), "muons": int(ak.count(events.Muon.pt))}
"""


@pytest.mark.parametrize("columns", ["all", "auto"])
def test_a_files_chunk_is_dropped_before_its_next_chunk_is_made(tmp_path, monkeypatch, columns):
    """``run_file`` drops a chunk (its events, the columns they hold, what ``process`` returned of it, and what
    uproot's array cache keeps of it) before it reads and makes the file's next: a job holds one chunk's columns at a
    time, not two. (With columns: auto the trace's empty chunk is made and processed first.)"""
    (tmp_path / "held.py").write_text(HELD)
    path = str(NANOAOD / "ttH_M125_2017.root")
    task = next(iter(dataset.tasks({"d": {"files": {path: "Events"}}})))
    analysis = processor.load(f"{tmp_path}/held.py:f", chunksize=CHUNKSIZE, columns=columns)
    seen, alive = analysis.instance.__globals__["seen"], []
    events_of = nanoevents.FileChunks.events

    def watched(made, *args):
        alive.append(sum(ref() is not None for ref in seen) + len(made.opened.file.array_cache))
        return events_of(made, *args)

    monkeypatch.setattr(nanoevents.FileChunks, "events", watched)
    out, events, _ = processor.run_file(path, task, analysis)
    assert out["n"] == events > 2 * CHUNKSIZE and out["muons"] > 0 and len(alive) > 2
    assert len(seen) == len(alive) or columns == "auto" and len(seen) > len(alive)  # (and the trace's calls)
    assert alive == [0] * len(alive)


def test_a_settled_job_computes_what_an_unsettled_one_does(tmp_path):
    """A job settles before its first file (``processor.settle``: the loaded modules frozen out of the garbage
    collector's walks, the schema's behaviours imported); what it computes is the same, chunk by chunk."""
    path = str(NANOAOD / "nano_dimuon.root")
    subprocess.run([sys.executable, "-c", SETTLED, path, str(tmp_path / "out.pkl"), str(CHUNKSIZE)], check=True)
    settled, settled_events = pickle.loads((tmp_path / "out.pkl").read_bytes())
    task = next(iter(dataset.tasks({"d": {"files": {path: "Events"}}})))
    analysis = processor.load("hepvine.examples.dimuon:DimuonProcessor", chunksize=CHUNKSIZE)
    theirs, events, _ = processor.run_file(path, task, analysis)
    assert settled_events == events > CHUNKSIZE  # several chunks
    assert_same(settled, theirs)


def test_the_agc_processor_reads_the_file_it_is_given_never_the_datasets_url_again(tmp_path):
    """The AGC processor's era comes from the file's tag, read from the file its events come from (a cache's or a
    recompressed copy's when hepvine reads one): the dataset's URL for it (``events.metadata["filename"]``) is not
    opened again, so that a replica that is down, or a slow origin, is not asked for what the copy holds."""
    from hepvine.devtools import generate

    local = generate.write_file(
        tmp_path / "t.root", "ttbar", 2000, seed=5, compression=uproot.ZSTD(1), schema="nanoaod", physics="compact"
    )["path"]
    with uproot.open(local) as f:
        assert "tag" in f.keys(cycle=False)
    gone = "root://127.0.0.1:9//store/gone/t.root"  # nothing listens on port 9

    def task(path: str):
        spec = {"ttbar": {"xsec": 1.0, "nominal": {"nevts_total": 2000, "files": [{"path": path, "nevts": 2000}]}}}
        return next(iter(dataset.tasks(spec)))

    analysis = processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 1000.0}, chunksize=700)
    ours, events, _ = processor.run_file(local, task(gone), analysis)
    theirs, _, _ = processor.run_file(local, task(local), analysis)
    assert events == 2000
    assert_same(ours, theirs)
