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
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from hepvine.products import progress

INCOMPLETE = 3
EVERY_S = 30


def publish(out: Path, job: str | None, warned: list) -> progress.Progress | None:
    """Update the campaign's progress and, for a job, its ad. A failure here (a full disk, a busy schedd, a batch
    result that cannot be read) is said once and never ends the campaign: progress is a view of it."""
    try:
        now = progress.update(out)
        if job:
            pairs = [str(x) for kv in now.job_attributes().items() for x in kv]
            edit = subprocess.run(["condor_qedit", job, *pairs], capture_output=True, text=True, timeout=60)
            if edit.returncode != 0:
                raise OSError(f"condor_qedit {job} failed: {edit.stderr.strip()}")
        return now
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        if not warned:
            warned.append(True)
            print(f"hepvine controller: the progress could not be updated ({e}); the campaign goes on", file=sys.stderr)
        return None


def dry_run(snakemake_args: list[str]) -> bool:
    """Whether SNAKEMAKE_ARGS ask for a dry run (-n, --dry-run, or -n among combined short flags such as -np)."""
    return any(
        a in ("--dry-run", "--dryrun") or (a[:1] == "-" and a[1:2] != "-" and a[1:].isalpha() and "n" in a[1:])
        for a in snakemake_args
    )


def restarted() -> bool:
    """Whether HTCondor has started this job before (a release after a hold, or a restart of the schedd)."""
    ad = os.environ.get("_CONDOR_JOB_AD")
    try:
        text = Path(ad).read_text() if ad else ""
    except OSError:
        return False
    starts = re.search(r"^NumJobStarts\s*=\s*(\d+)", text, re.M)
    return bool(starts) and int(starts.group(1)) > 1


def remove_stale_locks(campaign: str) -> list[Path]:
    """Remove the Snakemake locks a killed run of CAMPAIGN left (those that name files of results/<campaign>/; never
    another campaign's, as ``snakemake --unlock`` would); the removed files."""
    mine = os.path.abspath(f"results/{campaign}") + os.sep
    removed = []
    for lock in Path(".snakemake/locks").glob("*.lock"):
        try:
            if any(line.startswith(mine) for line in lock.read_text().splitlines()):
                number = lock.name.split(".")[0]
                for pair in Path(".snakemake/locks").glob(f"{number}.*.lock"):
                    pair.unlink(missing_ok=True)
                    removed.append(pair)
        except OSError:
            continue
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hepvine.commands.controller", description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help="this job's cluster.proc (its ad gets the progress)")
    parser.add_argument("--campaign", required=True, help="the campaign's name (results/<campaign>/)")
    parser.add_argument("--every", type=float, default=EVERY_S, help="seconds between progress updates")
    parser.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="-- then the campaign's snakemake arguments")
    args = parser.parse_args(argv)
    snakemake_args = args.snakemake_args[1:] if args.snakemake_args[:1] == ["--"] else args.snakemake_args
    out = Path("results") / args.campaign
    if args.job and restarted():
        # Released after a hold (or the schedd restarted): a run that HTCondor had to kill kept its locks.
        for lock in remove_stale_locks(args.campaign):
            print(f"hepvine controller: removed {lock}, left by this campaign's run that was killed", file=sys.stderr)
    signals: list[int] = []
    handed: list[int] = []
    child: subprocess.Popen | None = None

    def stop(signum, _frame) -> None:
        first = not signals
        signals.append(signum)
        # Only the first is handed on: a second SIGINT would interrupt Snakemake's own stopping of its jobs.
        if first and child is not None and child.poll() is None:
            handed.append(signum)
            os.write(
                2, f"hepvine controller: {signal.Signals(signum).name}: stopping the campaign as Ctrl-C does\n".encode()
            )
            child.send_signal(signal.SIGINT)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    # (Not by blocking signals around the start: Snakemake would inherit the mask, and neither it nor the factories
    # it starts would ever see a SIGINT or SIGTERM.)
    child = subprocess.Popen([sys.executable, "-m", "snakemake", *snakemake_args])
    if signals and not handed:  # one came while Snakemake was starting, before it could be handed on
        child.send_signal(signal.SIGINT)
    warned: list = []
    next_update = time.monotonic() + min(args.every, 5)  # the first figures soon after the main process has planned
    try:
        while True:
            try:
                rc = child.wait(timeout=1)
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= next_update:
                publish(out, args.job, warned)
                next_update = time.monotonic() + args.every
    finally:
        if child.poll() is None:  # the controller itself failed: stop the campaign as Ctrl-C would, then wait
            child.send_signal(signal.SIGINT)
            child.wait()
    final = publish(out, args.job, warned)
    if final is not None:
        print(final.line(), flush=True)
    if signals:
        return 128 + signals[0]
    if rc != 0 or dry_run(snakemake_args):  # a dry run makes no report
        return rc
    try:
        complete = json.loads((out / "report.json").read_text())["complete"]
    except (OSError, ValueError, KeyError):
        complete = False
    if not complete:
        print(
            f"hepvine controller: campaign {args.campaign} is incomplete: {out}/report.json lists its failed files, "
            "its accounting and the versions of the analysis its files ran (analysis_versions)"
        )
    return 0 if complete else INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
