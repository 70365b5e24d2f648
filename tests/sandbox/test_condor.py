"""The sandbox's personal HTCondor pool: at least two slots, and a vanilla job from the analysis user completes."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = pytest.mark.sandbox


def test_pool_has_two_slots(condor_env):
    out = subprocess.run(
        ["condor_status", "-af", "Name", "Cpus"], capture_output=True, text=True, env=condor_env, check=True
    ).stdout
    slots = [line for line in out.splitlines() if line.strip()]
    assert len(slots) >= 2, out


@pytest.mark.pool
def test_vanilla_job_completes(condor_env, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hello from $(hostname)\nid -un\n")
    script.chmod(0o755)
    (tmp_path / "job.sub").write_text(
        f"universe = vanilla\nexecutable = {script}\n"
        f"output = {tmp_path}/job.out\nerror = {tmp_path}/job.err\nlog = {tmp_path}/job.log\n"
        "request_cpus = 1\nrequest_memory = 64\nrequest_disk = 1000\nqueue\n"
    )
    submitted = subprocess.run(
        ["condor_submit", "-terse", str(tmp_path / "job.sub")],
        check=True,
        env=condor_env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    cluster = submitted.split(".")[0].strip()
    try:
        subprocess.run(
            ["condor_wait", "-wait", "120", str(tmp_path / "job.log")], check=True, env=condor_env, capture_output=True
        )
    except subprocess.CalledProcessError:
        held = subprocess.run(
            ["condor_q", cluster, "-af", "JobStatus", "HoldReason"], capture_output=True, text=True, env=condor_env
        ).stdout
        pytest.fail(f"job {cluster} did not complete in 120 s: {held}")
    finally:
        subprocess.run(["condor_rm", cluster], env=condor_env, capture_output=True)
    out = (tmp_path / "job.out").read_text().split()
    assert out[:2] == ["hello", "from"] and out[-1] == "hepvine", out
    history = subprocess.run(
        ["condor_history", "-limit", "1", "-af", "ExitCode", "JobStatus", "-userlog", str(tmp_path / "job.log")],
        capture_output=True,
        text=True,
        env=condor_env,
        check=True,
    ).stdout.split()
    assert history == ["0", "4"], history  # exit 0, JobStatus 4 = Completed
