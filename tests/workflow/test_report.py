"""The report's arithmetic: cores are the most file tasks that ran at once; rates follow from events and bytes."""

from __future__ import annotations

from hepvine import report


def record(name, start, end, events=100, nbytes=1000, error=None):
    return {"name": name, "path": f"/store/{name}.root", "start": start, "end": end, "events": events,
            "bytes_read": nbytes, "error": error}


def test_cores_are_peak_concurrency_and_rates_use_campaign_wall_time():
    records = [record("a", 0, 10), record("b", 5, 15), record("c", 9, 12), record("d", 15, 20, error="OSError: x")]
    summary = report.summarise(records)
    assert summary["cores"] == 3  # a, b and c overlap between 9 and 10
    assert summary["wall_seconds"] == 20
    assert summary["events"] == 300 and summary["bytes_read"] == 3000
    assert summary["event_rate_hz"] == 15.0 and summary["event_rate_per_core_hz"] == 5.0
    assert summary["complete"] is False and summary["failed_files"] == [{"path": "/store/d.root", "error": "OSError: x"}]
    assert [r["name"] for r in summary["inputs"]] == ["a", "b", "c", "d"]


def test_back_to_back_tasks_share_a_core():
    assert report.peak_concurrency([record("a", 0, 5), record("b", 5, 9)]) == 1
