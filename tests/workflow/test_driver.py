"""A batch job: one bad file never fails or hides its batch-mates (each file its own record, classified); a bug in
hepvine fails the job instead of turning into N failed files, while an exception in the user's analysis is that file's
permanent analysis-error; reads go over the sources again after a back-off."""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest
import uproot
from kept import generated_file

from hepvine.examples import agc as analysis
from hepvine.jobs import driver
from hepvine.model import dataset, records
from hepvine.model.limits import UNKNOWN_FILE_BYTES, Limits
from hepvine.reading import failures, fetch
from hepvine.routing import index as hv_index
from hepvine.work import nanoevents, processor

AGC = processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 3378})


def shard(paths: list[str], nevts: int = 1000) -> dict:
    """A shard of one batch of ttbar/nominal files, as hepvine.routing.index.shard writes it for an AGC spec."""
    metadata = {"process": "ttbar", "variation": "nominal", "xsec": 1.0, "nevts_total": nevts * len(paths), "era": None}
    return {
        "batch": "ttbar/nominal/direct/000/000",
        "rack": None,
        "xrootd_client": {},
        "files": [
            {
                "fid": f"ttbar/nominal/{i}",
                "path": p,
                "process": "ttbar",
                "variation": "nominal",
                "index": i,
                "nevts": nevts,
                "nevts_total": nevts * len(paths),
                "xsec": 1.0,
                "era": None,
                "bytes": None,
                "dataset": "ttbar__nominal",
                "treename": "Events",
                "metadata": metadata,
                "uuid": None,
                "steps": None,
                "route": fetch.local_route(p),
            }
            for i, p in enumerate(paths)
        ],
    }


@pytest.fixture
def files(tmp_path):
    good = [str(generated_file(tmp_path / f"g{i}.root", "ttbar", 1000, index=i, seed=9)["path"]) for i in range(2)]
    corrupt = tmp_path / "corrupt.root"
    corrupt.write_bytes(np.random.default_rng(1).bytes(3000))
    return good, str(corrupt), str(tmp_path / "missing.root")


@pytest.mark.parametrize("codec", [None, "zstd:5"])
def test_a_bad_file_never_hides_its_batch_mates(tmp_path, files, codec):
    """Each bad file is its own permanent failure, of its kind, and the good ones around it are analysed: bytes that
    are not ROOT, a missing file, an empty one, and a file cut short (an interrupted transfer: uproot's short read,
    which is no network's fault, and read as many rounds as allowed would read the same bytes)."""
    good, corrupt, missing = files
    empty, cut = tmp_path / "empty.root", tmp_path / "cut.root"
    empty.write_bytes(b"")
    cut.write_bytes(Path(good[0]).read_bytes()[: Path(good[0]).stat().st_size // 2])
    bad = {corrupt: "not-root", missing: "missing-file", str(empty): "truncated", str(cut): "truncated"}
    result = driver.run_batch(
        shard([good[0], corrupt, missing, str(empty), str(cut), good[1]]),
        AGC,
        codec,
        tmp_path / "copies" if codec else None,
        fetch.Retry(3, 0),
    )
    by_path = {r["path"]: r for r in result["records"]}
    assert [r["fid"] for r in result["records"]] == [f"ttbar/nominal/{i}" for i in range(6)]
    assert by_path[good[0]]["failure"] is None and by_path[good[1]]["failure"] is None
    assert {p: by_path[p]["failure"]["kind"] for p in bad} == bad
    assert {by_path[p]["failure"]["failure_class"] for p in bad} == {records.PERMANENT}
    if not codec:  # read once, not in 3 rounds (with the codec, the staged copy is read once anyway)
        assert all("round(s)" not in by_path[p]["failure"]["cause"] for p in bad)
    assert result["events"] == {"ttbar__nominal": 2000}
    expected = analysis.new_histogram()
    for path in good:
        analysis.fill(
            expected,
            uproot.open(path)["Events"].arrays(analysis.BRANCHES),
            "ttbar",
            analysis.event_weight(1.0, 3378, 6000),  # nevts_total: 1,000 for each of the 6 files
        )
    # The output accumulates the two good files only: each histogram the sample fills, and the events analysed.
    fills = analysis.variations("ttbar", "nominal", data=False)
    assert set(result["output"]) == {f"{r}_ttbar_{v}" for r in analysis.REGIONS for v in fills} | {
        "events_ttbar_nominal"
    }
    for region in analysis.REGIONS:
        for variation in fills:
            want = expected[{"region": region, "process": "ttbar", "variation": variation}]
            assert want.values().sum() > 0, f"{region} {variation} selected nothing"
            np.testing.assert_allclose(
                result["output"][f"{region}_ttbar_{variation}"].values(flow=True), want.values(flow=True), rtol=1e-12
            )
    assert result["output"]["events_ttbar_nominal"].values().sum() == 2000
    if codec:
        copies = sorted(p.name for p in (tmp_path / "copies").iterdir())
        assert copies == ["0.root", "5.root", "manifest.json"]  # no partial copy of the bad ones is left


def test_wrong_event_count_in_the_spec_is_a_permanent_failure(files):
    good, _, _ = files
    (record,) = driver.run_batch(shard([good[0]], nevts=999), AGC)["records"]
    assert record["failure"]["kind"] == "event-count" and "the dataset says 999" in record["failure"]["cause"]
    assert record["failure"]["failure_class"] == records.PERMANENT


def test_steps_that_cover_part_of_a_file_are_its_expected_events(files):
    """A preprocessed file's steps may cover part of it (coffea's dataset_tools.max_chunks, slice_chunks: num_entries
    stays the file's): the events they hold are what its run must process, and a count that differs from them is the
    file's event-count failure naming its tree and steps."""
    good, _, _ = files
    batch = shard([good[0]])  # 1,000 events
    batch["files"][0]["steps"] = [[0, 300], [300, 600]]
    (record,) = driver.run_batch(batch, AGC)["records"]
    assert record["failure"] is None and record["events"] == 600
    batch["files"][0]["nevts"] = 500  # the steps then hold 500 of what the file is said to have
    (record,) = driver.run_batch(batch, AGC)["records"]
    assert record["failure"]["kind"] == "event-count", record["failure"]
    cause = record["failure"]["cause"]
    assert "has 600 events in 'Events' in the 2 step(s) the fileset gives, the dataset says 500" in cause, cause


def broken(*args, **kwargs):
    raise TypeError("a bug in hepvine")


def test_a_bug_fails_the_job_instead_of_every_file(files, monkeypatch):
    """A bug in hepvine's own code (here: the chunking of a file, hepvine.work.processor) fails the job."""
    good, _, _ = files
    monkeypatch.setattr(processor, "chunks", broken)
    with pytest.raises(TypeError, match="a bug in hepvine"):
        driver.run_batch(shard(good), AGC)


@pytest.mark.parametrize("limited", [False, True])
def test_an_exception_in_the_analysis_is_the_files_permanent_analysis_error(files, monkeypatch, limited):
    """An exception raised by the user's analysis (here: TtbarProcessor.process's fills) is each file's own permanent
    analysis-error naming the user's frame; the job goes on, with or without a process per file."""
    good, _, _ = files

    def raising(*args, **kwargs):
        raise ZeroDivisionError("a bug in the user's analysis")

    monkeypatch.setattr(analysis, "region_histograms", raising)
    limits = Limits(rate_floor_mb_s=1, file_time_base_s=60, bytes_per_event=1) if limited else None
    result = driver.run_batch(shard(good), AGC, limits=limits)
    assert result["output"] is None and result["events"] == {}
    for record in result["records"]:
        failure = record["failure"]
        assert failure["kind"] == "analysis-error" and failure["failure_class"] == records.PERMANENT
        assert "ZeroDivisionError: a bug in the user's analysis" in failure["cause"]
        assert f"{analysis.__file__}:" in failure["fix"] and " in process" in failure["fix"], failure["fix"]


def test_a_files_process_sends_back_the_base_form_it_derived(files, tmp_path, monkeypatch):
    """With a process per file, the base form the first file's process derives, and the schema's form of it
    (``schemaform``), come back to the job (``Analysis.forms``): the second file, of the same layout, derives none."""
    from coffea.nanoevents.mapping import UprootSourceMapping

    from hepvine.work import schemaform

    good, _, _ = files
    log = tmp_path / "derived.log"
    extract = UprootSourceMapping._extract_base_form.__func__

    def logged(cls, tree, **kw):
        with open(log, "a") as out:  # written by the files' processes
            out.write(f"{tree.file.file_path}\n")
        return extract(cls, tree, **kw)

    monkeypatch.setattr(UprootSourceMapping, "_extract_base_form", classmethod(logged))
    fresh = processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 3378}, columns="all")
    limits = Limits(rate_floor_mb_s=1, file_time_base_s=60, bytes_per_event=1)
    result = driver.run_batch(shard(good), fresh, limits=limits)
    assert [r["failure"] for r in result["records"]] == [None, None]
    assert log.read_text().splitlines() == [good[0]]
    with uproot.open(good[1]) as f:
        key = nanoevents.layout_key(f["Events"])
    schema_key = ("schema", key, fresh.schema, schemaform.settings(fresh.schema))
    assert list(fresh.forms) == [key, schema_key]
    assert isinstance(fresh.forms[schema_key], schemaform.Built)  # (sent pickled, as the base form)


def test_a_files_process_sends_back_the_cut_it_planned(files, tmp_path, monkeypatch):
    """With the default, config columns: auto, the first file's process sends back the analysis's trace, the base form,
    the cut it planned of it (``cutform.Cut``) and the schema's form of that cut (``schemaform.Built``): the second
    file, of the same layout, traces, derives and plans nothing."""
    from hepvine.work import cutform, schemaform

    good, _, _ = files
    log = tmp_path / "planned.log"
    plan = cutform.plan

    def logged(base_form, schema, traced):
        with open(log, "a") as out:  # written by the files' processes
            out.write("planned\n")
        return plan(base_form, schema, traced)

    monkeypatch.setattr(cutform, "plan", logged)
    fresh = processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 3378})
    limits = Limits(rate_floor_mb_s=1, file_time_base_s=60, bytes_per_event=1)
    result = driver.run_batch(shard(good), fresh, limits=limits)
    assert [r["failure"] for r in result["records"]] == [None, None] and fresh.columns == "auto"
    assert log.read_text().splitlines() == ["planned"]
    with uproot.open(good[1]) as f:
        key = nanoevents.layout_key(f["Events"])
    [(traced_key, read)] = fresh.traced.items()
    assert traced_key[2] == key and read
    cut_key = ("cut", key, fresh.schema, read)
    assert list(fresh.forms)[:2] == [key, cut_key] and isinstance(fresh.forms[cut_key], cutform.Cut)
    [cut_schema_key] = list(fresh.forms)[2:]
    assert cut_schema_key[:4] == ("cut schema", key, fresh.schema, read)
    assert isinstance(fresh.forms[cut_schema_key], schemaform.Built)


def test_a_job_whose_files_run_in_processes_of_their_own_keeps_the_latest_used_traces(files, monkeypatch):
    """Each file in a process of its own: the job keeps the traces its files used last (``nanoevents.follow``), as one
    process would (``test_processor``: a, b, a, c, d, b keeps c, d, b), not those its files made last (b, c, d)."""
    good, _, _ = files
    monkeypatch.setattr(nanoevents, "KEPT_FORMS", 3)  # (the files' processes are forked: theirs too)
    batch = shard([good[0]] * 6)
    for entry, name in zip(batch["files"], ("a", "b", "a", "c", "d", "b")):
        entry["dataset"] = name
    fresh = processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 3378})
    limits = Limits(rate_floor_mb_s=1, file_time_base_s=60, bytes_per_event=1)
    result = driver.run_batch(batch, fresh, limits=limits)
    assert [r["failure"] for r in result["records"]] == [None] * 6
    assert [key[0] for key in fresh.traced] == ["c", "d", "b"]


def test_reads_retry_in_rounds_and_then_classify():
    calls = []

    def flaky(url):
        calls.append(url)
        if len(calls) < 4:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")
        return "read"

    route = {
        "lfn": "/store/f.root",
        "cache": "c1",
        "rack": "r1",
        "url": "root://c1//store/f.root",
        "sources": [
            {"url": "root://c1//store/f.root", "cache": "c1", "rack": "r1"},
            {"url": "root://o//store/f.root", "cache": None, "rack": None},
        ],
    }
    result, how = fetch.read(route, flaky, fetch.Retry(attempts=3, backoff_s=0.01))
    assert result == "read" and len(calls) == 4 and how["url"] == "root://o//store/f.root"
    assert [f["round"] for f in how["failover"]] == [1, 1, 2]
    calls.clear()
    with pytest.raises(fetch.FetchError, match="in 1 round") as e:
        fetch.read(route, flaky, fetch.Retry(attempts=1, backoff_s=0))
    assert failures.classify(e.value).failure_class == records.TRANSIENT


def test_failure_classes():
    assert failures.classify(OSError(errno.ENOSPC, "No space left on device")).kind == "disk-full"
    assert failures.classify(fetch.FetchError("x", missing=True)).failure_class == records.PERMANENT
    assert failures.classify(TimeoutError("timed out")).failure_class == records.TRANSIENT
    # XRootD's words (from the sandbox's GSI origin, tests/sandbox/test_gsi.py) when it refuses the credential.
    refused = fetch.FetchError(
        "/store/x.root: no source could be read in 3 round(s): root://127.0.0.1:1//store/x.root (OSError: Failed to "
        "open file: [FATAL] Auth failed: No protocols left to try)",
        missing=False,
    )
    failure = failures.classify(refused)
    assert (failure.kind, failure.failure_class) == ("credential", records.TRANSIENT) and "renew it" in failure.fix
    # Known, but not allowed to read this file (kXR_NotAuthorized): the file's own failure, with what to check.
    denied = failures.classify(OSError("Failed to open file: [ERROR] Server responded with an error: [3010] no access"))
    assert (denied.kind, denied.failure_class) == ("not-authorized", records.TRANSIENT) and "scopes" in denied.fix


def test_a_credential_every_source_refuses_is_not_tried_again():
    """Another round cannot help (a job's credential does not change while it runs): the read stops at once."""
    calls = []

    def refusing(url):
        calls.append(url)
        raise OSError(f"{url}: Failed to open file: [FATAL] Auth failed: No protocols left to try")

    route = {"lfn": "/store/f.root", "sources": [{"url": "root://c//store/f.root"}, {"url": "root://o//store/f.root"}]}
    with pytest.raises(fetch.FetchError, match="every source refused the credential") as e:
        fetch.read(route, refusing, fetch.Retry(attempts=3, backoff_s=5))
    assert len(calls) == 2 and e.value.refused and not e.value.missing
    assert failures.classify(e.value).kind == "credential"


@pytest.mark.parametrize(
    "origin, rounds, kind",
    [
        ("short", 1, "truncated"),  # both serve the file short: another round reads the same bytes
        ("missing", 1, "truncated"),  # the one source that has it serves it short
        ("down", 3, "unreachable"),  # the origin, when it is back, may have the whole file
    ],
)
def test_a_file_every_source_serves_short_is_not_read_again(origin, rounds, kind):
    """uproot's short read (a source served fewer bytes than the file's structure says) is the file's, not the
    network's: when no source can serve it whole, the read stops at once and the file is a permanent ``truncated``
    failure; while a source that is down might, the rounds go on."""
    calls = []
    errors = {
        "short": OSError("expected Chunk of length 1960,\nreceived 0 bytes from XRootDSource\nfor file path f.root"),
        "missing": FileNotFoundError("[3011] No such file or directory"),
        "down": OSError("[FATAL] Connection error"),
    }

    def reader(url):
        calls.append(url)
        raise errors["short" if "//c/" in url else origin]

    route = {"lfn": "/store/f.root", "sources": [{"url": "root://c//store/f.root"}, {"url": "root://o//store/f.root"}]}
    with pytest.raises(fetch.FetchError) as e:
        fetch.read(route, reader, fetch.Retry(attempts=3, backoff_s=0))
    assert len(calls) == 2 * rounds and e.value.truncated == (kind == "truncated") and not e.value.missing
    failure = failures.classify(e.value)
    assert failure.kind == kind and failure.failure_class == (
        records.PERMANENT if kind == "truncated" else records.TRANSIENT
    )
    assert failures.classify(errors["short"]).kind == "truncated"
    assert failures.classify(ValueError("cannot mmap an empty file")).kind == "truncated"


@pytest.mark.parametrize("codec", [None, "zstd:5"])
@pytest.mark.parametrize("bad", ["cut", "empty"])
def test_a_source_that_has_the_file_cut_short_is_failed_over(tmp_path, files, codec, bad):
    """A source serving the file cut short (or empty) is not the file's end: the next source, which has it whole, is
    read (analysed as it is, or staged and recompressed first), and the failed source is in the record."""
    whole = files[0][0]
    short = tmp_path / f"{bad}.root"
    short.write_bytes(Path(whole).read_bytes()[: Path(whole).stat().st_size // 2] if bad == "cut" else b"")
    batch = shard([whole])
    batch["files"][0]["route"] = fetch.local_route(str(short), (whole,))
    result = driver.run_batch(batch, AGC, codec, tmp_path / "copies" if codec else None, fetch.Retry(3, 0))
    (record,) = result["records"]
    assert record["failure"] is None and result["events"] == {"ttbar__nominal": 1000}
    assert record["fetch"]["url"] == whole and [f["url"] for f in record["fetch"]["failover"]] == [str(short)]


def test_a_short_read_of_a_file_that_is_whole_is_read_again(tmp_path, files, monkeypatch):
    """A read that comes back short of a file that has all its bytes (a source's fault: an HTTP server's, say) is
    not the file's: it is read again in rounds, and stays transient."""
    events_of = nanoevents.FileChunks.events
    calls = []

    def short_once(made, *args):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("expected Chunk of length 1960,\nreceived 0 bytes from HTTPSource\nfor file path f.root")
        return events_of(made, *args)

    monkeypatch.setattr(nanoevents.FileChunks, "events", short_once)
    path = files[0][0]
    metadata = {"process": "ttbar", "variation": "nominal", "xsec": 1.0, "nevts_total": 1000, "era": None}
    task = next(iter(dataset.tasks({"ttbar__nominal": {"files": {path: "Events"}, "metadata": metadata}})))
    with pytest.raises(OSError) as e:
        processor.run_file(path, task, AGC)
    assert not fetch.short_read(e.value) and not isinstance(e.value, fetch.CutShort)
    assert failures.classify(e.value).kind == "unreachable"
    assert processor.run_file(path, task, AGC)[1] == 1000  # the next round reads it


def test_a_file_cut_short_at_the_storage_is_its_permanent_failure_through_the_real_xrootd(tmp_path, files, services):
    """The sandbox's XRootD origin and an XCache in front of it, serving a file cut short (its baskets past the cut
    refused: "[3005] ... illegal seek", "[3000] ... invalid argument") and an empty one (uproot's short read): each
    is a permanent ``truncated`` failure, both its sources read once, its batch-mate analysed."""
    import shutil
    import uuid

    good = files[0][0]
    origin, cache = services["xrootd"]["origin"], services["xrootd"]["caches"]["rack-a"]
    tag = f"test-short-{uuid.uuid4().hex[:8]}"
    store = Path(origin["data_dir"]) / "store" / tag
    store.mkdir(parents=True)
    try:
        (store / "cut.root").write_bytes(Path(good).read_bytes()[: Path(good).stat().st_size // 2])
        (store / "empty.root").write_bytes(b"")
        batch = shard([good, f"/store/{tag}/cut.root", f"/store/{tag}/empty.root"])
        for entry in batch["files"][1:]:
            urls = [f"{server['url']}/{entry['path']}" for server in (cache, origin)]
            entry["route"] = {"lfn": entry["path"], "sources": [{"url": url} for url in urls]}
        result = driver.run_batch(batch, AGC, None, None, fetch.Retry(3, 0))
    finally:
        shutil.rmtree(store)
    first, *cut = result["records"]
    assert first["failure"] is None and result["events"] == {"ttbar__nominal": 1000}
    for record, says in zip(cut, ("where its ROOT header says", "expected Chunk of length")):
        failure = record["failure"]
        assert (failure["kind"], failure["failure_class"]) == ("truncated", records.PERMANENT), failure
        assert "every source that has the file serves it shorter" in failure["cause"]
        assert failure["cause"].count(says) == 2, failure["cause"]  # the cache and the origin, once each


def test_a_refused_credential_ends_the_job_with_nothing_of_its_batch_recorded(monkeypatch):
    """The fault is the credential's, not the files': no record would be true, so the job fails (its batch runs
    again, with the renewed credential) and says how to renew."""
    refusal = records.Failure("credential", records.TRANSIENT, "OSError: [FATAL] Auth failed", "renew it (...)")

    def run_file(entry, batch, *args):
        record = driver.new_record(hv_index.task(entry), batch)
        record.failure = refusal if entry["index"] == 1 else None
        return record, None

    monkeypatch.setattr(driver, "run_file", run_file)
    with pytest.raises(driver.CredentialRefused, match=r"nothing of batch ttbar/nominal/direct/000/000 is recorded"):
        driver.run_batch(shard(["/a.root", "/b.root"]), AGC)
    assert failures.classify(uproot.KeyInFileError("Jet_btagCSVV2")).kind == "missing-branch"
    assert failures.classify(KeyError("x")) is None and failures.classify(TypeError("x")) is None


@pytest.mark.parametrize(
    "versions, recorded",
    [(["1111aaaa2222bbbb"] * 2, "1111aaaa2222bbbb"), (["1111aaaa2222bbbb", "3333cccc4444dddd"], None)],
    ids=["unchanged", "changed-while-loading"],
)
def test_each_record_names_the_analysis_version_its_job_loaded(tmp_path, monkeypatch, versions, recorded):
    """``driver.main`` reads the analysis's version (``sources.version``) before and after it loads it, and gives it
    to every record of its batch; files that changed while it loaded make a version of their own (the report counts
    it as another: the job may have run either)."""
    read = iter(versions)
    monkeypatch.setattr(driver.sources, "version", lambda spec: next(read))
    monkeypatch.setattr(driver.index, "read", lambda path: shard(["/a.root", "/b.root"]))

    def run_batch(shard_, analysis_, *args):
        made = [driver.new_record(hv_index.task(entry), shard_["batch"]) for entry in shard_["files"]]
        return {"records": [record.to_dict() for record in made], "output": None, "events": {}}

    monkeypatch.setattr(driver, "run_batch", run_batch)
    out = tmp_path / "batch.pkl"
    argv = ["--shard", str(tmp_path / "shard.json"), "--analysis", "hepvine.examples.dimuon:DimuonProcessor"]
    assert driver.main([*argv, "--output", str(out)]) == 0
    labels = {r["analysis"] for r in driver.merge.read_records(out)["records"]}
    assert labels == {recorded or f"{versions[0]}>{versions[1]}"} and next(read, None) is None


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never answers: an XRootD read from it hangs (a real hang, in the
    XRootD client, not a sleep)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(socket.timeout, OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.slow
@pytest.mark.parametrize("codec", [None, "zstd:5"])
def test_a_hung_file_times_out_alone_and_leaves_nothing_behind(tmp_path, files, silent_server, codec):
    good, _, _ = files
    hung = f"root://127.0.0.1:{silent_server}//store/hung.root"
    limits = Limits(rate_floor_mb_s=1000, file_time_base_s=15, bytes_per_event=1)  # ~15 s a file
    copies = tmp_path / "copies" if codec else None
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # what earlier tests left is not ours
    result = driver.run_batch(shard([good[0], hung, good[1]]), AGC, codec, copies, fetch.Retry(1, 0), limits)
    by_path = {r["path"]: r for r in result["records"]}
    assert by_path[hung]["failure"]["kind"] == "timeout"
    assert by_path[hung]["failure"]["failure_class"] == records.TRANSIENT
    assert "not done after 15 s" in by_path[hung]["failure"]["cause"] and hung in by_path[hung]["failure"]["cause"]
    assert by_path[good[0]]["failure"] is None and by_path[good[1]]["failure"] is None
    assert result["events"] == {"ttbar__nominal": 2000}
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert left == []  # the hung file's process (and all it started) is gone
    if codec:
        assert sorted(p.name for p in copies.iterdir()) == ["0.root", "2.root", "manifest.json"]


def test_a_bug_in_a_files_own_process_still_fails_the_job(files, monkeypatch):
    good, _, _ = files
    monkeypatch.setattr(processor, "chunks", broken)
    limits = Limits(rate_floor_mb_s=1, file_time_base_s=60, bytes_per_event=1)
    with pytest.raises(RuntimeError, match="a bug, not the file's fault") as e:
        driver.run_batch(shard(good), AGC, limits=limits)
    assert "TypeError: a bug in hepvine" in str(e.value) and good[0] in str(e.value)


def test_limits_from_the_spec_size_or_the_events():
    limits = Limits(rate_floor_mb_s=0.5, file_time_base_s=300, bytes_per_event=4000)
    assert limits.file_bytes(1000, None) == 4_000_000 and limits.file_bytes(1000, 123) == 123
    assert limits.file_bytes(None, None) == UNKNOWN_FILE_BYTES  # a plain fileset's remote file: nothing says
    assert limits.file_limit_s(1000, 870_000_000) == 300 + 1740
    assert limits.job_runtime_min([(1000, 870_000_000)] * 8) == -(-(300 + 8 * 2040) // 60)
    # columns: auto: one file may run again with every field, the largest's limit once more
    two = [(1000, 870_000_000), (1000, 435_000_000)]
    assert limits.job_runtime_min(two, rerun=True) == -(-(300 + 2040 + 1170 + 2040) // 60)
    sizes = [(1000, 800_000_000), (1000, 600_000_000)]
    assert limits.recompress_disk_mb(sizes, copies_on_worker=False) == 500 + 800
    assert limits.recompress_disk_mb(sizes, copies_on_worker=True) == 500 + 800 + 1820
