"""What a failed task tells the user: the rule, the worker, the exit code or TaskVine's reason, and the last lines
of the job's output; the whole output is saved to a log file that Snakemake attaches to the error."""

from __future__ import annotations

from pathlib import Path

from snakemake_interface_executor_plugins.jobs import JobExecutorInterface

from .taskvine import GAVE_UP_LOST, TIME_LIMIT, TaskResult

TAIL_LINES = 20


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
        f"Last lines of its output:\n{shown}\nWhole output: {log}\n"
    )
    return message, log
