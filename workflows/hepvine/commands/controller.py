"""The controller of a submitted campaign (``hepvine submit``), run by HTCondor as a local-universe job:
``python -m snakemake <the campaign's arguments>`` as its child, steered by HTCondor's verbs.

- Progress: every ``--every`` seconds (and at the end) it reads the campaign's progress
  (``hepvine.products.progress``) and puts it into its own job ad with ``condor_qedit`` (``HepvineFilesDone``,
  ``HepvineFilesFailed``, ``HepvineFilesTotal``, ``HepvineEvents``, ``HepvineEventRateHz``, ``HepvineEtaS``).
- Stop: ``condor_rm`` and ``condor_hold`` send SIGTERM (SIGINT and SIGHUP likewise), which it hands to Snakemake as
  SIGINT, i.e. as Ctrl-C: running jobs cancelled, workers and factories stopped, finished jobs kept, the lock
  released. (Snakemake's own SIGTERM would wait for every running job to finish.) ``condor_release`` or a new
  submit starts it again and Snakemake resumes where it stopped.
- Exit code: Snakemake's when it failed; else 0 for a complete campaign and 3 for an incomplete one (its report
  lists the failed files with their causes), after the summary line on the job's output.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from hepvine.products import progress

INCOMPLETE = 3
DRY_RUN = {"-n", "--dry-run", "--dryrun"}
EVERY_S = 30


def publish(out: Path, job: str | None, warned: list) -> progress.Progress:
    """Update the campaign's progress and, for a job, its ad; a failed condor_qedit is said once, not fatal."""
    now = progress.update(out)
    if job:
        pairs = [str(x) for kv in now.job_attributes().items() for x in kv]
        edit = subprocess.run(["condor_qedit", job, *pairs], capture_output=True, text=True, timeout=60)
        if edit.returncode != 0 and not warned:
            warned.append(True)
            print(f"hepvine controller: condor_qedit {job} failed: {edit.stderr.strip()}", file=sys.stderr)
    return now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hepvine.commands.controller", description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help="this job's cluster.proc (its ad gets the progress)")
    parser.add_argument("--campaign", required=True, help="the campaign's name (results/<campaign>/)")
    parser.add_argument("--every", type=float, default=EVERY_S, help="seconds between progress updates")
    parser.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="-- then the campaign's snakemake arguments")
    args = parser.parse_args(argv)
    snakemake_args = args.snakemake_args[1:] if args.snakemake_args[:1] == ["--"] else args.snakemake_args
    out = Path("results") / args.campaign
    child = subprocess.Popen([sys.executable, "-m", "snakemake", *snakemake_args])
    signals: list[int] = []

    def stop(signum, _frame) -> None:
        signals.append(signum)
        print(f"hepvine controller: {signal.Signals(signum).name}: stopping the campaign as Ctrl-C does", flush=True)
        if child.poll() is None:
            child.send_signal(signal.SIGINT)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    warned: list = []
    next_update = time.monotonic() + min(args.every, 5)  # the first figures soon after the main process has planned
    while True:
        try:
            rc = child.wait(timeout=1)
            break
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() >= next_update:
            publish(out, args.job, warned)
            next_update = time.monotonic() + args.every
    final = publish(out, args.job, warned)
    print(final.line(), flush=True)
    if signals:
        return 128 + signals[0]
    if rc != 0 or DRY_RUN.intersection(snakemake_args):  # a dry run makes no report
        return rc
    try:
        complete = json.loads((out / "report.json").read_text())["complete"]
    except (OSError, ValueError, KeyError):
        complete = False
    if not complete:
        print(f"hepvine controller: campaign {args.campaign} is incomplete: {out}/report.json lists its failed files")
    return 0 if complete else INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
