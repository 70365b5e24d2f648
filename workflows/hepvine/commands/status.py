"""``hepvine status <campaign>``: where a campaign stands, from ``results/<campaign>/`` (files analysed and failed of
the total, events, rate, time left; ``hepvine.products.progress``), and for a submitted campaign (``hepvine
submit``) the state of its controller job in HTCondor. A foreground run and a submitted one alike."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from hepvine.commands.submit import CLUSTER
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


def controller_state(cluster: str) -> str:
    """One line on controller job CLUSTER: its state in the queue, or how it ended."""
    queue = subprocess.run(
        ["condor_q", cluster, "-af", "JobStatus", "HoldReason"], capture_output=True, text=True, timeout=60
    )
    if queue.returncode != 0:
        return f"controller: HTCondor job {cluster}.0 (condor_q failed: {queue.stderr.strip()})"
    fields = queue.stdout.split(maxsplit=1)
    if fields:
        state = JOB_STATUS.get(int(fields[0]), f"status {fields[0]}")
        if state == "held" and len(fields) > 1:
            state += f" ({fields[1].strip()}; condor_release {cluster} resumes it)"
        return f"controller: HTCondor job {cluster}.0 {state}"
    history = subprocess.run(
        ["condor_history", cluster, "-limit", "1", "-af", "JobStatus", "ExitCode"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ended = history.stdout.split()
    if len(ended) == 2 and ended[0] == "4":
        return f"controller: HTCondor job {cluster}.0 ended, exit code {ended[1]} (0: complete)"
    if ended and ended[0] == "3":
        return f"controller: HTCondor job {cluster}.0 was removed (condor_rm); submit again to resume"
    return f"controller: HTCondor job {cluster}.0 has left the queue"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine status", description=__doc__.split("\n\n")[0])
    parser.add_argument("campaign", help="the campaign's name (results/<campaign>/)")
    parser.add_argument("--directory", type=Path, default=Path("."), help="the directory the campaign runs in")
    args = parser.parse_args(argv)
    out = args.directory / "results" / args.campaign
    if not out.is_dir():
        print(f"hepvine status: no campaign {args.campaign} here ({out} does not exist)", file=sys.stderr)
        return 2
    print(progress.update(out).line())
    cluster_file = out / "submit" / CLUSTER
    if cluster_file.exists():
        print(controller_state(cluster_file.read_text().strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
