"""The report's arithmetic: cores are the most file tasks that ran at once; rates follow from events and bytes."""

from __future__ import annotations

import numpy as np
import pytest

from hepvine import plots, report


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


def test_timeline_keeps_every_byte_and_counts_running_tasks():
    records = [record("a", 100, 110, nbytes=8e9), record("b", 105, 115, nbytes=4e9), record("c", 115, 120, nbytes=0)]
    series = plots.timeline_series(records, bins=20)
    width = series["time"][1] - series["time"][0]
    assert series["time"][0] == 0 and series["time"][-1] == 20
    assert np.sum(series["gbps"]) * width * 1e9 / 8 == pytest.approx(12e9)
    assert series["running"].max() == pytest.approx(2)  # a and b overlap from 105 to 110
    assert series["gbps"][0] == pytest.approx(6.4)  # a alone: 8 GB over 10 s


def test_summary_names_failures_and_where_the_products_are():
    summary = report.summarise([record("a", 0, 10), record("d", 5, 20, error="OSError: gone")])
    text = report.summary_line(summary, "results/c")
    assert "1/2 files ok" in text and "FAILED /store/d.root: OSError: gone" in text and "INCOMPLETE" in text
    assert "results/c/histograms.root" in text
