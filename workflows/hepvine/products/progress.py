"""A campaign's progress while it runs, read from its results directory: files analysed and failed of the total,
events, the event rate over the last minutes and the time left at that rate.

Read incrementally: each batch's result (``results/<campaign>/files/<batch>.pkl``) is read once, and again only when
a rerun rewrites it; what was read is kept in ``results/<campaign>/progress.json``, so an update costs what finished
since the last one, not the campaign (the total comes from the index's ``expected.json``, read again only when the
main process rewrites it). ``hepvine status`` and a submitted campaign's controller (which puts the same figures into
its HTCondor job ad) both call ``update``; for a foreground run or a submitted one alike.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from hepvine.jobs.merge import UNREADABLE, read_records
from hepvine.model import atomic
from hepvine.model.limits import duration

STATE = "progress.json"
# The rate is measured over the updates of the last this many seconds (an update keeps a sample of the counts).
RATE_WINDOW_S = 600
SAMPLES_KEPT = 64


@dataclass(frozen=True)
class Progress:
    """Where a campaign stands. TOTAL is None before its main process has planned it (no index yet); RATE_HZ and
    ETA_S are None until two updates a while apart have seen files finish; VERDICT is the last report's
    (``complete``/``incomplete``) when it is newer than every batch result, else None (still running)."""

    campaign: str
    total: int | None
    ok: int
    failed: int
    events: int
    rate_hz: float | None
    files_per_s: float | None
    eta_s: float | None
    verdict: str | None

    @classmethod
    def nothing_yet(cls, campaign: str) -> Progress:
        return cls(campaign, None, 0, 0, 0, None, None, None, None)

    def line(self) -> str:
        total = "?" if self.total is None else f"{self.total:,}"
        parts = [f"campaign {self.campaign}: {self.ok:,}/{total} files analysed, {self.failed:,} failed"]
        parts.append(f"{self.events:,} events")
        if self.verdict is not None:
            parts.append(self.verdict)
        else:
            parts.append("rate n/a" if self.rate_hz is None else f"{self.rate_hz:,.0f} events/s")
            parts.append("ETA n/a" if self.eta_s is None else f"ETA {duration(self.eta_s)}")
        return ", ".join(parts)

    def job_attributes(self) -> dict[str, int | float]:
        """The figures as HTCondor job attributes (``condor_q -af HepvineFilesDone HepvineFilesTotal``)."""
        return {
            "HepvineFilesDone": self.ok,
            "HepvineFilesFailed": self.failed,
            "HepvineFilesTotal": -1 if self.total is None else self.total,
            "HepvineEvents": self.events,
            "HepvineEventRateHz": round(self.rate_hz or 0.0, 1),
            "HepvineEtaS": -1 if self.eta_s is None else round(self.eta_s),
        }


def _load_state(path: Path) -> dict:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"batches": {}, "samples": []}
    return state if isinstance(state, dict) and "batches" in state else {"batches": {}, "samples": []}


def _batch_counts(result_file: Path) -> list[int]:
    """[files ok, files failed, events] of one batch's result (the driver's pickle)."""
    result = read_records(result_file)
    ok = [r for r in result["records"] if r["failure"] is None]
    return [len(ok), len(result["records"]) - len(ok), sum(r["events"] for r in ok)]


def update(out: Path | str, now: float | None = None) -> Progress:
    """Read what finished since the last update of campaign directory OUT (results/<campaign>), keep it, and say
    where the campaign stands."""
    out = Path(out)
    now = time.time() if now is None else now
    state = _load_state(out / STATE)
    expected = out / "index" / "expected.json"
    if expected.exists():
        mtime = expected.stat().st_mtime_ns
        if state.get("expected_mtime") != mtime or "planned" not in state:
            rows = json.loads(expected.read_text())["files"]
            state["total"], state["expected_mtime"] = len(rows), mtime
            state["planned"] = sorted({batch for _, _, batch in rows})
    # Only the batches the plan holds: a result of an earlier plan's batch (files_per_job changed, the dataset
    # shrank) stays on disk, and would be counted beside the ones that now hold its files.
    planned = {f"{batch}.pkl" for batch in state["planned"]} if "planned" in state else None
    batches, seen, newest = state["batches"], set(), 0
    results = out / "files"
    for result_file in results.rglob("*.pkl") if results.is_dir() else ():
        key = result_file.relative_to(results).as_posix()
        if planned is not None and key not in planned:
            continue
        mtime = result_file.stat().st_mtime_ns
        seen.add(key)
        newest = max(newest, mtime)
        if batches.get(key, [None])[0] != mtime:
            try:
                batches[key] = [mtime, *_batch_counts(result_file)]
            except (*UNREADABLE, AttributeError):
                # Being replaced (results are renamed into place: the next update reads it), or not a batch result
                # this hepvine can read (the report says more): not counted.
                batches.pop(key, None)
    for gone in set(batches) - seen:  # removed by a forced rerun
        del batches[gone]
    ok, failed, events = (sum(b[i] for b in batches.values()) for i in (1, 2, 3))
    samples = [s for s in state["samples"] if now - s[0] <= RATE_WINDOW_S][-SAMPLES_KEPT + 1 :]
    samples.append([now, ok + failed, events])
    state["samples"] = samples
    atomic.write_json(out / STATE, state, indent=None)

    rate_hz = files_per_s = eta_s = None
    first = samples[0]
    if now - first[0] > 0 and ok + failed > first[1]:
        rate_hz = (events - first[2]) / (now - first[0])
        files_per_s = (ok + failed - first[1]) / (now - first[0])
        if state.get("total") is not None:
            eta_s = max(0, state["total"] - ok - failed) / files_per_s
    report = out / "report.json"
    verdict = None
    if report.exists() and report.stat().st_mtime_ns >= newest:
        try:
            verdict = "complete" if json.loads(report.read_text())["complete"] else "incomplete"
        except (OSError, ValueError, KeyError):
            verdict = None
    return Progress(out.name, state.get("total"), ok, failed, events, rate_hz, files_per_s, eta_s, verdict)
