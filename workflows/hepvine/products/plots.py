"""The campaign's plots: a default plot of every 1-D and 2-D histogram of the analysis's output (``output.coffea``,
after its postprocess; a histogram with category axes gets one line per category of a 1-D remainder, or is skipped
when more remains), and a timeline of the campaign — the data rate and the number of file tasks running, over time.

Written as PNG files into one directory: ``<path in the output, '/' as '__'>.png`` and ``timeline.png``.
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

from hepvine.jobs.merge import add_analysis_option, load  # noqa: E402
from hepvine.products import output as hv_output  # noqa: E402


def histogram(h, title: str, path: Path) -> bool:
    """A default plot of H (1-D: steps; 2-D: colour map; category axes: one 1-D line per category, up to a 1-D
    remainder) at PATH; False when H has no such view."""
    import hist

    categories = [a for a in h.axes if isinstance(a, (hist.axis.StrCategory, hist.axis.IntCategory))]
    numeric = [a for a in h.axes if a not in categories]
    if len(numeric) not in (1, 2) or (categories and len(numeric) != 1) or len(categories) > 1:
        return False
    fig, ax = plt.subplots(figsize=(8, 6))
    if categories:
        axis = categories[0]
        for value in list(axis)[:20]:
            mplhep.histplot(h[{axis.name: value}], ax=ax, label=f"{axis.name}={value}")
        ax.legend(fontsize="small")
    elif len(numeric) == 1:
        mplhep.histplot(h, ax=ax)
    else:
        mplhep.hist2dplot(h, ax=ax)
    ax.set_title(title, loc="left", fontsize="medium")
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return True


_TO_DRAW: list = []  # (name, histogram, path) for the processes draw_all forks


def _draw(index: int) -> bool:
    name, h, path = _TO_DRAW[index]
    return histogram(h, name, path)


def draw_all(named: list[tuple[str, object]], outdir: Path, processes: int = 1) -> None:
    """A default plot of each (name, histogram) of NAMED into OUTDIR, as ``<name, '/' as '__'>.png``. The first one
    with a default view is drawn here, which loads what every figure needs (fonts, the error intervals' scipy); with
    PROCESSES > 1 the rest are shared among that many processes forked from this one (a figure costs ~50 ms; an
    analysis has hundreds). A figure that fails fails the whole (a child's exception is raised here)."""
    global _TO_DRAW
    _TO_DRAW = [(name, h, outdir / f"{name.replace('/', '__')}.png") for name, h in named]
    try:
        first = next((i for i in range(len(_TO_DRAW)) if _draw(i)), len(_TO_DRAW))
        rest = range(first + 1, len(_TO_DRAW))
        if processes > 1 and len(rest) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(min(processes, len(rest)), mp_context=multiprocessing.get_context("fork")) as pool:
                list(pool.map(_draw, rest, chunksize=max(1, len(rest) // (4 * processes))))
        else:
            for index in rest:
                _draw(index)
    finally:
        _TO_DRAW = []


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
    parser.add_argument("--merged", required=True, type=Path, help="the merged result (its records: the timeline)")
    parser.add_argument("--output", type=Path, help="output.coffea: one plot per 1-D/2-D histogram")
    parser.add_argument("--outdir", required=True, type=Path)
    parser.add_argument(
        "--processes", type=int, default=1, help="draw the histograms in this many processes (the job's threads)"
    )
    add_analysis_option(parser)
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.analysis:
        from hepvine.work import processor

        processor.make_importable(args.analysis)
    if args.output is not None:
        from coffea.util import load as coffea_load

        draw_all(list(hv_output.histograms(coffea_load(str(args.output)))), args.outdir, args.processes)
    timeline(load(args.merged)["records"], args.outdir / "timeline.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
