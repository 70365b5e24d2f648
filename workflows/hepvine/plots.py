"""The campaign's plots from the merged result: per region, data points over the stacked simulation (mplhep style),
and a timeline of the campaign — the data rate and the number of file tasks running, over time.

Written as PNG files into one directory: ``<region>.png`` for each region and ``timeline.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; a login node has no display

import matplotlib.pyplot as plt  # noqa: E402 (the backend is chosen first)
import mplhep  # noqa: E402
import numpy as np  # noqa: E402

from hepvine import analysis  # noqa: E402
from hepvine.merge import load  # noqa: E402

DATA = "data"
OBSERVABLE_LABEL = {"4j1b": r"$H_T$ [GeV]", "4j2b": r"$m_{bjj}$ [GeV]"}


def stacked(h, region: str, path: Path) -> None:
    """REGION's nominal histograms: simulation stacked (largest at the bottom), data as points, log scale."""
    mplhep.style.use("CMS")
    fig, ax = plt.subplots(figsize=(10, 8))
    processes = list(h.axes["process"]) if h is not None else []
    simulation = [p for p in processes if p != DATA]
    if simulation:
        hists = [h[{"region": region, "process": p, "variation": "nominal"}] for p in simulation]
        order = np.argsort([x.sum().value for x in hists])[::-1]
        mplhep.histplot([hists[i] for i in order], stack=True, histtype="fill", ax=ax,
                        label=[simulation[i] for i in order])
    if DATA in processes:
        mplhep.histplot(h[{"region": region, "process": DATA, "variation": "nominal"}], histtype="errorbar",
                        color="black", label=DATA, ax=ax)
    ax.set_xlabel(OBSERVABLE_LABEL.get(region, "observable [GeV]"))
    ax.set_ylabel("events / 20 GeV")
    ax.set_yscale("log")  # weighted simulation and unweighted data differ by orders of magnitude in the demo
    ax.set_title(f"region {region}", loc="left", fontsize="medium")
    if processes:
        ax.legend()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def timeline_series(records: list[dict], bins: int = 100) -> dict:
    """The campaign's data rate (Gbps, each task's bytes spread evenly over its run) and running tasks, per time bin
    (seconds since the first task started)."""
    if not records:
        return {"time": np.zeros(1), "gbps": np.zeros(1), "running": np.zeros(1)}
    t0 = min(r["start"] for r in records)
    t1 = max(r["end"] for r in records)
    edges = np.linspace(0.0, max(t1 - t0, 1e-3), bins + 1)
    width = edges[1] - edges[0]
    nbytes = np.zeros(bins)
    busy = np.zeros(bins)
    for r in records:
        start, end = r["start"] - t0, max(r["end"] - t0, r["start"] - t0 + 1e-6)
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0, None)
        busy += overlap / width
        nbytes += r["bytes_read"] * overlap / (end - start)
    return {"time": edges, "gbps": nbytes * 8 / width / 1e9, "running": busy}


def timeline(records: list[dict], path: Path) -> None:
    series = timeline_series(records)
    mplhep.style.use("CMS")
    fig, (rate, running) = plt.subplots(2, 1, sharex=True, figsize=(10, 8))
    rate.stairs(series["gbps"], series["time"], fill=True, alpha=0.6)
    rate.set_ylabel("data rate [Gbps]")
    running.stairs(series["running"], series["time"], color="tab:orange")
    running.set_ylabel("tasks running")
    running.set_xlabel("time since the first file task started [s]")
    failed = sum(1 for r in records if r["failure"] is not None)
    rate.set_title(f"{len(records)} files, {failed} failed", loc="left", fontsize="medium")
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--merged", required=True, type=Path)
    parser.add_argument("--outdir", required=True, type=Path)
    args = parser.parse_args(argv)
    merged = load(args.merged)
    args.outdir.mkdir(parents=True, exist_ok=True)
    for region in analysis.REGIONS:
        stacked(merged["hist"], region, args.outdir / f"{region}.png")
    timeline(merged["records"], args.outdir / "timeline.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
