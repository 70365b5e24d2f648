"""TaskVine on the sandbox: a manager runs 20 tasks on workers that ``vine_factory -T condor`` submitted to the pool,
the workers are gone once the factory stops (removed together by their tag), and a worker without the manager's
password is refused."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from snakemake_executor_plugin_taskvine import taskvine

pytestmark = pytest.mark.sandbox


def queued_jobs(condor_env, scratch_dir) -> list[str]:
    """The pool's jobs that the factory with SCRATCH_DIR submitted (it runs workers from a script there)."""
    out = subprocess.run(
        ["condor_q", "-allusers", "-af", "ClusterId", "Cmd"], capture_output=True, text=True, env=condor_env, check=True
    ).stdout
    return [line for line in out.splitlines() if f" {scratch_dir}/" in line]


def wait_until(predicate, timeout_s: float, poll_s: float = 0.5) -> bool:
    """Poll PREDICATE until it is true (True) or TIMEOUT_S passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def run_all(manager, specs, timeout_s):
    for spec in specs:
        manager.submit(spec)
    results = []
    deadline = time.monotonic() + timeout_s
    while len(results) < len(specs) and time.monotonic() < deadline:
        result = manager.wait(2)
        if result is not None:
            results.append(result)
    return results


@pytest.mark.pool
def test_condor_factory_runs_20_tasks(services, condor_env, tmp_path):
    password = taskvine.write_password_file(tmp_path)
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=tmp_path / "run-info")
    assert queued_jobs(condor_env, tmp_path / "factory") == []
    factory = taskvine.Factory(
        batch_type="condor",
        manager_host="127.0.0.1",
        manager_port=manager.port,
        scratch_dir=tmp_path / "factory",
        password_file=password,
        min_workers=2,
        max_workers=2,
        cores=1,
        memory_mb=512,
        disk_mb=1000,
        worker_timeout_s=60,
    )
    try:
        specs = [
            taskvine.TaskSpec(command=f"echo task-{i} $(id -un)", tag=f"t{i}", cores=1, memory_mb=100, disk_mb=10)
            for i in range(20)
        ]
        results = run_all(manager, specs, timeout_s=240)
        assert len(results) == 20, f"only {len(results)} of 20 tasks came back; factory log: {factory.log}"
        assert all(r.successful for r in results), [(r.tag, r.result, r.output) for r in results]
        assert sorted(r.output.split()[0] for r in results) == sorted(f"task-{i}" for i in range(20))
        # The tasks ran inside HTCondor jobs of the analysis user.
        assert {r.output.split()[1] for r in results} == {"hepvine"}
        assert manager.workers_joined() >= 1
        assert queued_jobs(condor_env, tmp_path / "factory"), "the factory's workers should be HTCondor jobs"
        # Each carries the factory's tag, by which its stop removes them all in one condor_rm.
        tagged = subprocess.run(
            ["condor_q", "-constraint", f'{taskvine.JOB_TAG} == "{factory.job_tag}"', "-af", "ClusterId"],
            capture_output=True,
            text=True,
            env=condor_env,
            check=True,
        ).stdout.split()
        assert len(tagged) == len(queued_jobs(condor_env, tmp_path / "factory")) >= 1, tagged
    finally:
        began = time.monotonic()
        factory.stop()
        print(f"\nfactory with its jobs stopped in {time.monotonic() - began:.2f} s")
    # Its jobs were removed at once, and then it was ended (it had only their removal one by one left to do).
    assert factory.proc.returncode == -signal.SIGKILL, factory.proc.returncode
    gone = wait_until(lambda: queued_jobs(condor_env, tmp_path / "factory") == [], timeout_s=60)
    assert gone, f"workers still queued after the factory stopped: {queued_jobs(condor_env, tmp_path / 'factory')}"


def test_worker_without_password_is_refused(services, tmp_path):
    password = taskvine.write_password_file(tmp_path / "right")
    wrong = taskvine.write_password_file(tmp_path / "wrong")
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=tmp_path / "run-info")
    manager.submit(taskvine.TaskSpec(command="echo done", cores=1))
    intruders = [
        taskvine.Worker(
            manager_host="127.0.0.1",
            manager_port=manager.port,
            workspace=tmp_path / "w-wrong",
            password_file=wrong,
            connect_s=20,
        ),
        taskvine.Worker(
            manager_host="127.0.0.1", manager_port=manager.port, workspace=tmp_path / "w-none", connect_s=20
        ),
    ]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert manager.wait(1) is None, "a task ran on a worker that had no valid password"
        assert manager.workers_connected() == 0
    finally:
        for w in intruders:
            w.stop()
    # The same manager does accept a worker with the right password (so the refusal above was about the password).
    good = taskvine.Worker(
        manager_host="127.0.0.1",
        manager_port=manager.port,
        workspace=tmp_path / "w-good",
        password_file=password,
        connect_s=30,
    )
    try:
        result = None
        deadline = time.monotonic() + 30
        while result is None and time.monotonic() < deadline:
            result = manager.wait(1)
        assert result is not None and result.successful and result.output.strip() == "done"
    finally:
        good.stop()
