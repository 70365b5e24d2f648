"""What a failed task tells the user: the rule, the worker, the exit code or TaskVine's reason, the last lines of the
job's output and of the rule's own log files (where a rule's command sends its errors: ``2> {log}``), as they came
back; the whole output is saved to a log file that Snakemake attaches to the error."""

from __future__ import annotations

from pathlib import Path

from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from .taskvine import GAVE_UP_LOST, TIME_LIMIT, TaskResult

TAIL_LINES = 20
TAIL_BYTES = 1 << 16  # of a rule's log, read from its end: its last lines, however long it grew


def describe_failure(job: JobExecutorInterface, result: TaskResult, log_dir: Path) -> tuple[str, Path]:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{result.tag}.log"
    log.write_text(result.output)
    where = f"on worker {result.hostname}" if result.hostname else "before reaching a worker"
    if result.result == "success":
        why = f"exit code {result.exit_code}"
    elif result.result == GAVE_UP_LOST:
        why = (
            f"its worker was lost {result.lost_workers} times, once more than --taskvine-retries allows: find out "
            "why the workers vanish (the factory's and workers' logs are in the run directory), or raise "
            "--taskvine-retries"
        )
    elif result.result == TIME_LIMIT:
        why = (
            f"it ran past its time limit, the rule's runtime resource ({job.resources.get('runtime')} min), and "
            "was cancelled: raise the rule's runtime (--set-resources RULE:runtime=MINUTES), or find out why it "
            "was slow (its worker, its inputs)"
        )
    else:
        why = f"TaskVine: {result.result}" + (f", exit code {result.exit_code}" if result.exit_code else "")
    tail = result.output.rstrip().splitlines()[-TAIL_LINES:]
    shown = "\n".join(f"    {line}" for line in tail) if tail else "    (no output)"
    message = (
        f"TaskVine task {result.tag} of rule {job.name} failed {where} ({why}). "
        f"Last lines of its output:\n{shown}\n{_log_tails(job)}Whole output: {log}\n"
    )
    return message, log


def _log_tails(job: JobExecutorInterface) -> str:
    """The last lines of each of JOB's log files that is here (brought back from its worker, or written in place on a
    shared filesystem), each headed by its path; '' when none is."""
    said = []
    for path in job.log:
        try:
            with open(path, "rb") as f:
                start = f.seek(max(0, f.seek(0, 2) - TAIL_BYTES))
                lines = f.read().decode(errors="replace").rstrip().splitlines()[1 if start else 0 :][-TAIL_LINES:]
        except OSError:  # not there (the job failed before writing it), or not a file
            continue
        if lines:
            said.append(f"Last lines of its log {path}:\n" + "\n".join(f"    {line}" for line in lines) + "\n")
    return "".join(said)
