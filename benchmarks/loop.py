"""``make bench`` (the physicist's loop; issue 30): a second analysis of the demo's 24 ZSTD copies (240,000 events)
on the sandbox profile — the command a physicist runs again after changing the processor — timed whole (from its
start to its exit, as its user waits for it), beside its analysis window (first file started to last ended, from the
campaign's summary).

Side by side in one session, alternated round by round: the process mode and ``--taskvine-library``, each with the
campaign's last step (the report: root merge, products, plots) on a worker (``host_steps_max_files=0``, as a large
campaign's is) and on the login node (the default for a campaign this small). Then, in a block of their own (a
command that keeps no workers stops those kept before it), ``--taskvine-library`` with the workers kept between
commands (``--taskvine-keep-workers-s``): one run first that starts them, not counted (the loop's first command),
then the rounds, the two report places alternated; the kept workers are stopped at the end. Each run starts from
no results (``results/loop`` removed). The aim (issue 30): the whole command within 2x its analysis window. Writes
results/bench/loop.json and prints one table.

Needs the demo's copies (``results/demo/dataset.zstd.json``): made by ``make demo``, or here first if missing.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATASET = REPO / "results" / "demo" / "dataset.zstd.json"
CAMPAIGN = "loop"
SUMMARY = re.compile(r"this command: (?P<whole>[\d.]+) s in all; the analysis window .*?: (?P<window>[\d.]+) s")
KEEP_S = 120
MODES = {"process": [], "library": ["--taskvine-library"]}
KEPT = {"library, workers kept": ["--taskvine-library", f"--taskvine-keep-workers-s={KEEP_S}"]}
STEPS = {"a worker": "host_steps_max_files=0", "login node": None}


def run(mode: str, steps: str) -> dict:
    """One campaign of the loop (MODE: of MODES or KEPT); its whole time and analysis window (s)."""
    shutil.rmtree(REPO / "results" / CAMPAIGN, ignore_errors=True)
    config = [f"dataset={DATASET.relative_to(REPO)}", f"campaign={CAMPAIGN}", "recompress=off"]
    config += ["site=site-configs/sandbox.yaml"] + ([STEPS[steps]] if STEPS[steps] else [])
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/sandbox", *{**MODES, **KEPT}[mode], "--config"]
    cmd += config
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    whole_s = time.perf_counter() - started
    found = SUMMARY.search(done.stdout + done.stderr)  # (the campaign's summary: hepvine.products.report)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"benchmarks/loop.py: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    # The whole command as its user waits for it, start to exit; the summary's own figure ends where it is printed,
    # before Snakemake's and the interpreter's exit.
    return {"whole_s": round(whole_s, 2), "summary_whole_s": float(found["whole"]), "window_s": float(found["window"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each way, alternated")
    args = parser.parse_args(argv)
    if not DATASET.exists():
        subprocess.run([sys.executable, "-m", "hepvine.devtools.demo"], cwd=REPO, check=True)
    runs = {(mode, steps): [] for mode in MODES for steps in STEPS}
    for _ in range(args.rounds):
        for key in runs:
            runs[key].append(run(*key))
    kept = {(mode, steps): [] for mode in KEPT for steps in STEPS}
    try:
        run(*next(iter(kept)))  # the loop's first command: starts the workers it keeps
        for _ in range(args.rounds):
            for key in kept:
                kept[key].append(run(*key))
    finally:
        subprocess.run([sys.executable, "-m", "snakemake_executor_plugin_taskvine", "stop-kept"], cwd=REPO, check=False)
    runs.update(kept)
    rows = []
    for (mode, steps), results in runs.items():
        ratios = [r["whole_s"] / r["window_s"] for r in results]
        rows.append({"mode": mode, "report_on": steps, "runs": results, "median_ratio": statistics.median(ratios)})
    out = REPO / "results" / "bench" / "loop.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"dataset": str(DATASET.relative_to(REPO)), "rows": rows}, indent=1))
    print("| mode | report on | whole command / analysis window, each run | median ratio (aim: 2) |")
    print("|---|---|---|---|")
    for row in rows:
        each = ", ".join(f"{r['whole_s']:.1f} / {r['window_s']:.1f} s" for r in row["runs"])
        print(f"| {row['mode']} | {row['report_on']} | {each} | {row['median_ratio']:.1f}x |")
    print(f"(written to {out.relative_to(REPO)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
