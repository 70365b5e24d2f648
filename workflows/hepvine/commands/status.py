"""``hepvine status <campaign>``: where a campaign stands, from ``results/<campaign>/`` (files analysed and failed of
the total, events, rate, time left; ``hepvine.products.progress``), and for a submitted campaign (``hepvine
submit``) the state of its controller job in HTCondor. A foreground run and a submitted one alike."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from hepvine.commands.submit import CLUSTER, SubmitError, condor_tool, controllers
from hepvine.products import progress

JOB_STATUS = {
    1: "idle",
    2: "running",
    3: "removed, stopping",
    4: "completed",
    5: "held",
    6: "transferring",
    7: "suspended",
}
# A controller in these states is still at work (or paused): an earlier run's report is no verdict yet.
AT_WORK = {1, 2, 5, 6, 7}


def controller_state(out: Path) -> tuple[str | None, bool]:
    """(one line on the campaign's controller job: its state in the queue, or how the last one ended; None if the
    campaign was never submitted, whether a controller is queued)."""
    queued = controllers(out.resolve())
    if queued:
        job, status, reason = queued[-1]
        state = JOB_STATUS.get(status, f"status {status}")
        if status == 5:
            state += f" ({reason}; condor_release {job.split('.')[0]} resumes it)"
        return f"controller: HTCondor job {job} {state}", status in AT_WORK
    cluster_file, log = out / "submit" / CLUSTER, out / "submit" / "campaign.log"
    if not cluster_file.exists():
        return None, False
    cluster = cluster_file.read_text().strip()
    history = condor_tool(
        "condor_history", cluster, "-limit", "1", "-af", "JobStatus", "ExitCode", "-userlog", str(log)
    )
    ended = history.stdout.split()
    if len(ended) == 2 and ended[0] == "4":
        if ended[1] == "0":
            return f"controller: HTCondor job {cluster}.0 ended, exit code 0 (complete)", False
        return (
            f"controller: HTCondor job {cluster}.0 ended, exit code {ended[1]} (3: incomplete, see report.json; "
            f"else the campaign failed: {out / 'submit' / 'campaign.err'})",
            False,
        )
    if ended and ended[0] == "3":
        return f"controller: HTCondor job {cluster}.0 was removed (condor_rm); submit again to resume", False
    return f"controller: HTCondor job {cluster}.0 has left the queue", False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine status", description=__doc__.split("\n\n")[0])
    parser.add_argument("campaign", help="the campaign's name (results/<campaign>/)")
    parser.add_argument("--directory", type=Path, default=Path("."), help="the directory the campaign runs in")
    args = parser.parse_args(argv)
    out = args.directory / "results" / args.campaign
    if not out.is_dir():
        print(
            f"hepvine status: no campaign {args.campaign} here ({out} does not exist); run it where the campaign "
            "runs, or give --directory",
            file=sys.stderr,
        )
        return 2
    now = progress.update(out)
    try:
        state, queued = controller_state(out) if (out / "submit").is_dir() else (None, False)
    except SubmitError as e:
        state, queued = f"controller: unknown ({e})", False
    # A report from an earlier run is no verdict while a controller is still at work.
    print(dataclasses.replace(now, verdict=None).line() if queued else now.line())
    if state:
        print(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
