"""What a failed task tells the user (failures.describe_failure): pure logic, the task's result and the job faked;
the real failures are in test_snakemake_suite and test_lost_worker."""

from __future__ import annotations

from types import SimpleNamespace

from snakemake_executor_plugin_taskvine.failures import TAIL_BYTES, TAIL_LINES, describe_failure
from snakemake_executor_plugin_taskvine.taskvine import TaskResult


def result(output: str) -> TaskResult:
    return TaskResult(1, "analyse-2-abc", False, 1, "success", output, "w1")


def test_the_last_lines_of_the_rules_log_are_in_the_message(tmp_path, monkeypatch):
    """A rule's command sends its errors to its log (``2> {log}``): the log's last lines, as they came back from the
    worker, are in the message beside the task's output; a log that is not there is left out."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    long = [f"line {i}" for i in range(20_000)] + ["ModuleNotFoundError: No module named 'not_installed_xyz'"]
    few = ["x" * 10_000] * 8  # longer than TAIL_BYTES in fewer than TAIL_LINES lines: none shown cut
    (tmp_path / "logs" / "a.log").write_text("\n".join(long) + "\n")
    assert (tmp_path / "logs" / "a.log").stat().st_size > TAIL_BYTES  # read from its end
    job = SimpleNamespace(name="analyse", log=["logs/a.log", "logs/never-written.log"], resources={})
    message, saved = describe_failure(job, result("Error in rule analyse:\n    message: None"), tmp_path / "failed")
    assert "failed on worker w1 (exit code 1)" in message and "    message: None" in message
    shown = message.split("Last lines of its log logs/a.log:\n")[1].split("Whole output")[0].splitlines()
    assert shown == [f"    {line}" for line in long[-TAIL_LINES:]]
    assert "never-written" not in message and saved.read_text().startswith("Error in rule analyse")
    (tmp_path / "logs" / "a.log").write_text("\n".join(few) + "\n")
    message, _ = describe_failure(job, result(""), tmp_path / "failed")
    shown = message.split("Last lines of its log logs/a.log:\n")[1].split("Whole output")[0].splitlines()
    assert shown and shown == [f"    {line}" for line in few[-len(shown) :]]


def test_a_job_without_a_log_says_its_output_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = SimpleNamespace(name="merge", log=[], resources={})
    message, _ = describe_failure(job, result(""), tmp_path / "failed")
    assert "(no output)" in message and "Last lines of its log" not in message
