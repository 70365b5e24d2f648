"""Files rewritten during a run, on real TaskVine workers: a job's input or a source of the workflow (an analysis file
edited while its campaign runs) reaches the tasks submitted after the change, also from a worker that cached the old
one. Credential files (--taskvine-credential-env): each task gets the file that $X509_USER_PROXY (or
$BEARER_TOKEN_FILE) names as an input in its sandbox, mode 0600, with the variable pointing at it there; a file
rewritten during the run (a renewal) reaches the tasks submitted after it, while workers keep the old one for the
tasks that had it; as processes and as library calls alike; and the credential's bytes are in no log, no command line
and nothing Snakemake keeps."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time

import pytest

from snakemake_executor_plugin_taskvine import taskvine

pytestmark = pytest.mark.sandbox

# The task says the file's mode, where it is, and its checksum (never its bytes: a library call's output is kept in
# the run directory).
LOOK = 'stat -c %a "$X509_USER_PROXY"; echo "$X509_USER_PROXY"; sha256sum < "$X509_USER_PROXY" | cut -c1-64'


def run_tasks(manager: taskvine.Manager, specs: list[taskvine.TaskSpec], timeout_s: float = 120) -> list[str]:
    """Each spec's output, in order (each is submitted after the one before has finished)."""
    outputs = []
    for spec in specs:
        manager.submit(spec)
        result, deadline = None, time.monotonic() + timeout_s
        while result is None and time.monotonic() < deadline:
            result = manager.wait(1)
        assert result is not None and result.successful, result
        outputs.append(result.output)
    return outputs


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def secret(tag: str) -> str:
    return f"-----BEGIN CERTIFICATE-----\n{tag}-{os.urandom(16).hex()}\n-----END CERTIFICATE-----\n"


def manager_and_worker(tmp_path, **options) -> tuple[taskvine.Manager, taskvine.Worker]:
    """A manager with OPTIONS (on a free port, with a password) and one worker of 2 cores connected to it."""
    password = taskvine.write_password_file(tmp_path / "secret")
    manager = taskvine.Manager(port=0, password_file=password, **options)
    worker = taskvine.Worker(
        manager_host="127.0.0.1",
        manager_port=manager.port,
        workspace=tmp_path / "worker",
        password_file=password,
        cores=2,
        memory_mb=2000,
        disk_mb=2000,
    )
    return manager, worker


@pytest.mark.parametrize("library", [False, True], ids=["process", "library-call"])
def test_each_task_gets_the_credential_file_and_a_renewed_one_after_it_changes(tmp_path, library):
    proxy = tmp_path / "x509up_u1000"
    first = secret("first")
    proxy.write_text(first)
    run_info = tmp_path / "run-info"
    manager, worker = manager_and_worker(
        tmp_path, run_info_dir=run_info, library=library, credential_files={"X509_USER_PROXY": str(proxy)}
    )
    try:
        spec = taskvine.TaskSpec(command=LOOK, cores=1, function=library)
        before = run_tasks(manager, [spec], timeout_s=240 if library else 120)[0].splitlines()
        mode, path, digest = before
        assert mode == "600" and digest == sha256(first)
        assert path.endswith(f"/{taskvine.CREDENTIAL_PREFIX}x509_user_proxy") and path != str(proxy)
        assert os.path.isabs(path)
        # Renewed on the access point (as voms-proxy-init rewrites it): the next task has the new one.
        renewed = secret("renewed")
        time.sleep(0.01)
        proxy.write_text(renewed)
        mode, _, digest = run_tasks(manager, [spec])[0].splitlines()
        assert mode == "600" and digest == sha256(renewed)
    finally:
        taskvine.stop_all([worker])
    # Neither credential is in the manager's logs or the worker's.
    for text in (first, renewed):
        line = text.splitlines()[1]
        for path in [*run_info.rglob("*"), *(tmp_path / "worker").rglob("*.log"), tmp_path / "worker.log"]:
            if path.is_file() and "cache" not in path.parts:
                assert line not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("given_as", ["inputs", "sources"])
@pytest.mark.parametrize("kept", [False, True], ids=["run", "kept-workers"])
def test_a_file_changed_during_the_run_reaches_the_tasks_after_it_from_a_worker_that_cached_it(
    tmp_path, monkeypatch, given_as, kept
):
    """A job's local input, or a source of the workflow (git-tracked files are: an analysis among them), rewritten
    during the run (an analysis file edited while its campaign runs): the tasks submitted after the change get its new
    contents, also from the worker that cached the old ones (TaskVine names a file by its contents when it is
    declared: ``Manager._changed`` declares it again), on workers kept between runs too (sources cached "forever")."""
    monkeypatch.setattr(taskvine, "SOURCES_LOOK_S", 0.0)  # (the sources looked at for each task)
    analysis = tmp_path / "analysis.py"
    analysis.write_text("SELECTION = 'first'\n")
    manager, worker = manager_and_worker(tmp_path, run_info_dir=tmp_path / "run-info", kept=kept)
    try:
        files = {given_as: [(str(analysis), "analysis.py")]}
        look = taskvine.TaskSpec(command="cat analysis.py", cores=1, **files)
        assert run_tasks(manager, [look, look]) == ["SELECTION = 'first'\n"] * 2  # (the second: from the cache)
        time.sleep(0.01)
        analysis.write_text("SELECTION = 'edited'\n")
        assert run_tasks(manager, [look]) == ["SELECTION = 'edited'\n"]  # the one worker had cached the first
    finally:
        taskvine.stop_all([worker])


def test_a_run_with_a_credential_gives_it_to_each_job_and_keeps_it_out_of_every_log(workflow, tmp_path):
    proxy = tmp_path / "x509up"
    proxy.write_text(secret("job"))
    wf = workflow(
        """
rule all:
    input: expand("out/{i}.txt", i=range(3))

rule look:
    output: "out/{i}.txt"
    shell: 'stat -c %a "$X509_USER_PROXY" > {output}; sha256sum < "$X509_USER_PROXY" | cut -c1-64 >> {output}'
"""
    )
    done = subprocess.run(
        wf.command("--verbose"),
        cwd=wf.root,
        env=dict(os.environ, X509_USER_PROXY=str(proxy)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for i in range(3):
        assert (wf.root / "out" / f"{i}.txt").read_text() == f"600\n{sha256(proxy.read_text())}\n"
    line = proxy.read_text().splitlines()[1]
    assert line not in done.stdout + done.stderr
    for path in (wf.root / ".snakemake").rglob("*"):
        if path.is_file():
            assert line not in path.read_text(errors="replace"), path
