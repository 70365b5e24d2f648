"""A batch job: one bad file never fails or hides its batch-mates (each file its own record, classified); a bug in
hepvine fails the job instead of turning into N failed files; reads go over the sources again after a back-off."""

from __future__ import annotations

import errno

import numpy as np
import pytest
import uproot

from hepvine import analysis, driver, fetch, generate, records


def shard(paths: list[str], nevts: int = 1000) -> dict:
    return {"batch": "ttbar/nominal/direct/000/000", "rack": None, "xrootd_client": {},
            "files": [{"fid": f"ttbar/nominal/{i}", "path": p, "process": "ttbar", "variation": "nominal",
                       "index": i, "nevts": nevts, "nevts_total": nevts * len(paths), "xsec": 1.0,
                       "route": fetch.local_route(p)} for i, p in enumerate(paths)]}


@pytest.fixture
def files(tmp_path):
    good = [str(generate.write_file(tmp_path / f"g{i}.root", "ttbar", 1000, index=i, seed=9)["path"]) for i in range(2)]
    corrupt = tmp_path / "corrupt.root"
    corrupt.write_bytes(np.random.default_rng(1).bytes(3000))
    return good, str(corrupt), str(tmp_path / "missing.root")


@pytest.mark.parametrize("codec", [None, "zstd:5"])
def test_a_bad_file_never_hides_its_batch_mates(tmp_path, files, codec):
    good, corrupt, missing = files
    result = driver.run_batch(shard([good[0], corrupt, missing, good[1]]), 3378, codec,
                              tmp_path / "copies" if codec else None, fetch.Retry(1, 0))
    by_path = {r["path"]: r for r in result["records"]}
    assert [r["fid"] for r in result["records"]] == [f"ttbar/nominal/{i}" for i in range(4)]
    assert by_path[good[0]]["failure"] is None and by_path[good[1]]["failure"] is None
    assert by_path[corrupt]["failure"]["kind"] == "not-root" and by_path[missing]["failure"]["kind"] == "missing-file"
    assert {by_path[p]["failure"]["failure_class"] for p in (corrupt, missing)} == {records.PERMANENT}
    assert result["events"] == {"ttbar/nominal": 2000}
    expected = analysis.new_histogram()
    for path in good:
        analysis.fill(expected, uproot.open(path)["Events"].arrays(analysis.BRANCHES), "ttbar",
                      analysis.event_weight(1.0, 3378, 4000))
    np.testing.assert_allclose(result["hist"].values(), expected.values())
    if codec:
        copies = sorted(p.name for p in (tmp_path / "copies").iterdir())
        assert copies == ["0.root", "3.root", "manifest.json"]  # no partial copy of the bad ones is left


def test_wrong_event_count_in_the_spec_is_a_permanent_failure(files):
    good, _, _ = files
    (record,) = driver.run_batch(shard([good[0]], nevts=999), 3378)["records"]
    assert record["failure"]["kind"] == "event-count" and "the spec says 999" in record["failure"]["cause"]


def test_a_bug_fails_the_job_instead_of_every_file(files, monkeypatch):
    good, _, _ = files

    def broken(*args, **kwargs):
        raise TypeError("a bug in hepvine")

    monkeypatch.setattr(analysis, "fill", broken)
    with pytest.raises(TypeError, match="a bug in hepvine"):
        driver.run_batch(shard(good), 3378)


def test_reads_retry_in_rounds_and_then_classify():
    calls = []

    def flaky(url):
        calls.append(url)
        if len(calls) < 4:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")
        return "read"

    route = {"lfn": "/store/f.root", "cache": "c1", "rack": "r1", "url": "root://c1//store/f.root",
             "sources": [{"url": "root://c1//store/f.root", "cache": "c1", "rack": "r1"},
                         {"url": "root://o//store/f.root", "cache": None, "rack": None}]}
    result, how = fetch.read(route, flaky, fetch.Retry(attempts=3, backoff_s=0.01))
    assert result == "read" and len(calls) == 4 and how["url"] == "root://o//store/f.root"
    assert [f["round"] for f in how["failover"]] == [1, 1, 2]
    calls.clear()
    with pytest.raises(fetch.FetchError, match="in 1 round") as e:
        fetch.read(route, flaky, fetch.Retry(attempts=1, backoff_s=0))
    assert records.classify(e.value).failure_class == records.TRANSIENT


def test_failure_classes():
    assert records.classify(OSError(errno.ENOSPC, "No space left on device")).kind == "disk-full"
    assert records.classify(fetch.FetchError("x", missing=True)).failure_class == records.PERMANENT
    assert records.classify(TimeoutError("timed out")).failure_class == records.TRANSIENT
    assert records.classify(uproot.KeyInFileError("Jet_btagCSVV2")).kind == "missing-branch"
    assert records.classify(KeyError("x")) is None and records.classify(TypeError("x")) is None
