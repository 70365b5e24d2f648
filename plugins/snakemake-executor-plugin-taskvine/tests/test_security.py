"""Security of the executor plugin (issue 14), on the sandbox's real services:

- hostile worker-group names, features, HTCondor requirements, environment lists and password-file paths are
  refused at start, naming the setting or key, and nothing they hold ever runs (a marker file is never created);
  values that reach a shell through the adapter are quoted;
- the run's password is per run, mode 0600 in a 0700 directory of the user outside the checkout, never in a log,
  and gone when the run ends; run directories are unique per run; the workflow's envvars are not on command lines;
- workers see only the allowed environment: a canary variable of the submitting environment is in no HTCondor job
  ad (condor_q -l, condor_history -l) and not in the job's environment, while an allowed one reaches the job;
- the manager listens in --taskvine-port-range;
- with --taskvine-library only jobs of one core that fit a slot's memory are library calls, the others processes.
"""

from __future__ import annotations

import os
import re
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from snakemake_runs import slow_snakefile

from snakemake_executor_plugin_taskvine import ExecutorSettings, taskvine, validation
from snakemake_executor_plugin_taskvine.tasks import call_fits

pytestmark = pytest.mark.sandbox

# One per pytest worker (-n): a test clears it before and checks it after.
MARKER = f"/tmp/taskvine-hostile-marker-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
# Each would create MARKER if it reached a shell (or the submit file's macro expansion) unquoted.
HOSTILE = [
    f"a; touch {MARKER}",
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f"a\ntouch {MARKER}",
    f"a' && touch {MARKER} && echo '",
    f'a" && touch {MARKER} && echo "',
    "${HOME}",
]
IDS = ["semicolon", "dollar-paren", "backticks", "newline", "single-quote", "double-quote", "dollar-brace"]
QUICK = slow_snakefile("echo {wildcards.i} > {output}", n=2)


@pytest.fixture
def marker():
    if os.path.exists(MARKER):
        os.unlink(MARKER)
    yield MARKER
    assert not os.path.exists(MARKER), "a hostile value ran"


def settings(**kw) -> ExecutorSettings:
    return ExecutorSettings(**kw)


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_hostile_setting_values_are_refused_naming_the_setting(value, marker):
    found = "\n".join(
        validation.problems(
            settings(worker_features=f"ok,{value}", condor_requirements=value, worker_env=f"PATH,{value}")
        )
    )
    assert "--taskvine-worker-features: feature" in found and "--taskvine-worker-env" in found, found
    assert "--taskvine-condor-requirements" in found, found
    assert "letters, digits" in found


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_hostile_groups_file_values_are_refused_naming_the_key(tmp_path, value, marker):
    import yaml

    groups = tmp_path / "groups.yaml"
    groups.write_text(
        yaml.safe_dump(
            {
                "worker_groups": [
                    {"name": value},
                    {"name": "b", "features": ["ok", value]},
                    {"name": "c", "condor_requirements": value},
                ]
            }
        )
    )
    found = "\n".join(validation.problems(settings(worker_groups=groups)))
    assert f"worker_groups[0] name {value!r}" in found, found
    assert f"group 'b': feature {value!r}" in found, found
    assert f"group 'c': condor_requirements {value!r}" in found, found


def test_hostile_password_file_path_is_refused(tmp_path, marker):
    path = tmp_path / "pw;touch $(id)"
    path.write_text("secret\n")
    path.chmod(0o600)
    found = "\n".join(validation.problems(settings(password_file=path)))
    assert "--taskvine-password-file" in found and "shell commands" in found, found


def test_requirements_that_are_no_classad_are_refused_before_any_job():
    """condor_submit refuses them, and the factory would retry forever: the run would wait for workers for ever."""
    found = validation.problems(settings(condor_requirements='(TARGET.Arch == "X86_64"'))
    assert any("--taskvine-condor-requirements" in p and "not a ClassAd expression" in p for p in found), found


def test_safe_values_pass():
    assert (
        validation.problems(
            settings(
                worker_features="rack-a,site.x,gpu_2",
                condor_requirements='(TARGET.Rack == "rack-a") && (Cpus >= 2)',
                worker_env="default,MY_SITE_*",
                port_range="9100-9199",
            )
        )
        == []
    )


@pytest.mark.parametrize("value", ["9200-9100", "0-10", "9100", "a-b", "9100-70000"])
def test_bad_port_range_is_refused(value):
    assert any("--taskvine-port-range" in p for p in validation.problems(settings(port_range=value)))


def test_adapter_refuses_hostile_names_and_paths_itself(tmp_path, marker):
    """The last line of defence, if a caller skipped validation: nothing is started."""
    for kw in [
        dict(features=[f"a;touch {MARKER}"]),
        dict(condor_requirements=f"$ENV(HOME) || `touch {MARKER}`"),
        dict(scratch_dir=tmp_path / f"x;touch {MARKER}"),
    ]:
        with pytest.raises(ValueError):
            taskvine.Factory(
                **{
                    "batch_type": "local",
                    "manager_host": "127.0.0.1",
                    "manager_port": 1,
                    "scratch_dir": tmp_path / "f",
                    **kw,
                }
            )
    with pytest.raises(ValueError):
        taskvine.Worker(
            manager_host="127.0.0.1",
            manager_port=1,
            workspace=tmp_path / "w",
            password_file=tmp_path / f"p;touch {MARKER}",
        )


def test_hostile_values_stop_snakemake_before_any_job(workflow, marker):
    wf = workflow(QUICK)
    (wf.root / "groups.yaml").write_text(f'worker_groups:\n  - {{name: "a$(touch {MARKER})"}}\n')
    done = wf.run(
        "--taskvine-worker-groups", "groups.yaml", "--taskvine-worker-features", f"x;touch {MARKER}", timeout=120
    )
    assert done.returncode != 0
    assert "worker_groups[0] name" in done.stderr and "--taskvine-worker-features: feature" in done.stderr
    assert not (wf.root / "out").exists()


def test_worker_env_values_are_quoted_for_the_wrapper(tmp_path, marker):
    """A value that reaches the factory's wrapper (a shell command) arrives as it was written, and runs nothing."""
    value = f"$(touch {MARKER}); `touch {MARKER}` '\" ${{HOME}}"
    password = taskvine.write_password_file(tmp_path / "secret")
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=tmp_path / "run-info")
    factory = taskvine.Factory(
        batch_type="local",
        manager_host="127.0.0.1",
        manager_port=manager.port,
        scratch_dir=tmp_path / "factory",
        password_file=password,
        worker_timeout_s=30,
        worker_env={"TASKVINE_TEST_VALUE": value},
    )
    try:
        manager.submit(taskvine.TaskSpec(command='printf %s "$TASKVINE_TEST_VALUE"', cores=1))
        result = None
        deadline = time.monotonic() + 60
        while result is None and time.monotonic() < deadline:
            result = manager.wait(1)
        assert result is not None and result.successful, result
        assert result.output == value
    finally:
        factory.stop()


def test_password_file_is_private_exclusive_and_refuses_links(tmp_path):
    path = taskvine.write_password_file()
    try:
        directory = path.parent
        assert directory.name.startswith(taskvine.PRIVATE_PREFIX)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700 and directory.stat().st_uid == os.getuid()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text().strip()) == 64
        with pytest.raises(FileExistsError):  # never overwritten
            taskvine.write_password_file(directory)
    finally:
        taskvine.remove_private_directory(path.parent)
    assert not path.parent.exists()
    (tmp_path / "target").write_text("")
    (tmp_path / "vine.password").symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):  # a link planted where the password goes is not followed
        taskvine.write_password_file(tmp_path)
    assert (tmp_path / "target").read_text() == ""


# The job records what a user on the machine could learn: the private directory's and password's modes, and the
# password itself (to check that it is in no log). It also records the envvar declared by the workflow.
SECRETS_SNAKEFILE = """
envvars: "TASKVINE_TEST_TOKEN"

rule all:
    input: "out/look.txt", expand("out/{i}.txt", i=range(2))

rule look:
    output: "out/look.txt"
    shell: "for d in /tmp/snakemake-vine-*; do stat -c '%a %u %n' $d $d/vine.password; "
           "echo $d $(cat $d/vine.password); done > {output}; echo token=$TASKVINE_TEST_TOKEN >> {output}"

rule other:
    output: "out/{i}.txt"
    shell: "echo token=$TASKVINE_TEST_TOKEN > {output}"
"""


def _private_dirs() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith(taskvine.PRIVATE_PREFIX)}


@pytest.mark.alone  # it lists every run directory under /tmp before and after
@pytest.mark.parametrize("library", [False, True], ids=["processes-ssl", "library"])
def test_secrets_private_never_logged_and_removed_token_off_command_lines(workflow, library):
    wf = workflow(SECRETS_SNAKEFILE)
    before = _private_dirs()  # left over from runs that were killed
    token = "tok-" + os.urandom(8).hex()
    env = dict(os.environ, TASKVINE_TEST_TOKEN=token)
    done = subprocess.run(
        wf.command(
            "--verbose",
            "--taskvine-port-range",
            "9400-9420",
            *(["--taskvine-library"] if library else ["--taskvine-ssl"]),
        ),
        cwd=wf.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ours = [
        line.split()
        for line in (wf.root / "out" / "look.txt").read_text().splitlines()
        if not any(old in line for old in before)
    ]  # lines about this run's private directory
    modes = [(m[0], m[1]) for m in ours if len(m) == 3 and m[0].isdigit()]
    assert modes == [("700", str(os.getuid())), ("600", str(os.getuid()))], ours
    password = next(m[1] for m in ours if len(m) == 2 and re.fullmatch(r"[0-9a-f]{64}", m[1]))
    look = [" ".join(m) for m in ours]
    # The job got the workflow's envvar, and it is on no command line that the log shows.
    assert f"token={token}" in look and (wf.root / "out" / "0.txt").read_text().strip() == f"token={token}"
    assert "TaskVine task" in done.stderr  # the --verbose log shows the commands ...
    assert token not in done.stderr and password not in done.stderr  # ... without the token or the password
    for path in (wf.root / ".snakemake").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert password not in text and token not in text, path
    assert not list(wf.root.rglob("vine.password")), "a password file inside the workflow directory"
    assert not [p for p in wf.root.rglob("*") if p.name.startswith("key") or p.suffix == ".key"], (
        "the TLS key inside the workflow directory"
    )
    assert _private_dirs() == before, "the run's private directory was not removed"
    port = int(re.search(r"TaskVine manager listening on port (\d+)", done.stderr).group(1))
    assert 9400 <= port <= 9420


def test_two_runs_started_together_get_their_own_run_directories(tmp_path):
    """Two workflows started at the same moment, with one run-info directory: each run its own directory."""
    from snakemake_runs import Workflow

    shared = tmp_path / "run-info"
    runs = [Workflow(tmp_path / f"wf{i}", QUICK) for i in range(2)]
    procs = [wf.popen("--taskvine-run-info-dir", str(shared)) for wf in runs]
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, out[-3000:]
    names = sorted(p.name for p in shared.iterdir())
    assert len(names) == 2 and all(re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{6}", n) for n in names), names


# Six managers made in the same instant, each in a process of its own, on port 0 (cctools scans from 1024 up); each
# keeps listening until its standard input closes, so that no port is given up and taken again. A manager that lost
# its port is made again: TaskVine's notice of it goes to the process's standard error, its port alone to the output.
SAME_INSTANT = """
import sys, time
from snakemake_executor_plugin_taskvine import taskvine
start = float(sys.argv[1])
time.sleep(max(0.0, start - time.time()))
manager = taskvine.Manager(port=0, run_info_dir=sys.argv[2])
print(manager.port, flush=True)
sys.stdin.read()
"""


def test_managers_made_in_the_same_instant_each_listen_on_a_port_of_their_own(tmp_path):
    start = time.time() + 3
    errs = [tmp_path / f"m{i}.err" for i in range(6)]
    procs = []
    for i, err in enumerate(errs):
        with err.open("w") as stderr:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", SAME_INSTANT, str(start), str(tmp_path / f"m{i}")],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            )
    # A port, or nothing if the manager failed (or gave no port within a minute: the test fails, it does not hang).
    firsts = [proc.stdout.readline().strip() if select.select([proc.stdout], [], [], 60)[0] else "" for proc in procs]
    outs = [first + proc.communicate(timeout=120)[0] + err.read_text() for first, proc, err in zip(firsts, procs, errs)]
    assert all(proc.returncode == 0 for proc in procs), outs
    ports = [int(line) for line in firsts]
    assert len(set(ports)) == 6, ports


def test_a_manager_that_fails_to_listen_is_made_again_only_on_any_port():
    tries = []

    def make(**kwargs):
        tries.append(kwargs)
        if len(tries) < 3:
            raise Exception("Could not create manager on:\nport: 0")
        return "manager"

    assert taskvine.listening(make, {"port": 0}, attempts=5, pause_s=(0, 0)) == "manager" and len(tries) == 3
    tries.clear()
    with pytest.raises(Exception, match="Could not create"):
        taskvine.listening(make, {"port": 9123}, attempts=1)
    assert len(tries) == 1


# Each job writes its environment; the canary must not be in it, the allowed XRD_ variable must.
ENV_SNAKEFILE = """
rule all:
    input: expand("env/{i}.txt", i=range(2))

rule env:
    output: "env/{i}.txt"
    shell: "env > {output}"
"""


def _ads(command: list[str], condor_env: dict) -> str:
    done = subprocess.run(command, env=condor_env, capture_output=True, text=True, timeout=60)
    return done.stdout


@pytest.mark.pool
def test_workers_get_only_the_allowed_environment(workflow, condor_env, marker):
    wf = workflow(ENV_SNAKEFILE)
    canary, allowed = "canary-" + os.urandom(6).hex(), "allowed-" + os.urandom(6).hex()
    env = dict(os.environ, TASKVINE_CANARY_SECRET=canary, XRD_TASKVINE_ALLOWED=allowed)
    started = int(time.time())
    # Shell syntax inside a ClassAd string is a valid expression (true here); it reaches no shell, so nothing runs.
    requirements = f'(TARGET.Arch =!= "none") || (MY.Owner == "x && touch {MARKER} && echo")'
    proc = subprocess.Popen(
        wf.command(
            "--taskvine-workers",
            "condor",
            "--taskvine-max-workers",
            "1",
            "--taskvine-condor-requirements",
            requirements,
            "--taskvine-worker-memory-mb",
            "500",
            "--taskvine-worker-disk-mb",
            "500",
            "--default-resources",
            "mem_mb=100",
            "disk_mb=10",
        ),
        cwd=wf.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []

    def watch():  # the worker jobs' ads while they are queued or running
        while proc.poll() is None:
            seen.append(_ads(["condor_q", "-l", "-constraint", f"QDate >= {started}"], condor_env))
            time.sleep(1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # the executor removes its HTCondor jobs
            proc.wait(60)
    watcher.join()
    assert proc.returncode == 0, out[-3000:]
    history = _ads(["condor_history", "-l", "-constraint", f"QDate >= {started}"], condor_env)
    ads = "".join(seen) + history
    assert "vine_worker" in ads and allowed in ads, "no ad of the run's worker jobs was seen"
    assert canary not in ads, "the canary reached an HTCondor job ad"
    environments = [line for line in ads.splitlines() if line.startswith("Environment = ")]
    assert environments and not any("CONDOR_CONFIG" in line for line in environments), environments[:1]
    for path in (wf.root / "env").glob("*.txt"):
        job_env = path.read_text()
        assert f"XRD_TASKVINE_ALLOWED={allowed}" in job_env and canary not in job_env


# --taskvine-library: one-core jobs that fit a slot's memory are calls; more threads or more memory, processes.
LIBRARY_SNAKEFILE = """
rule all:
    input: "out/one.txt", "out/two.txt", "out/big.txt"

rule job:
    output: "out/{name}.txt"
    threads: lambda wildcards: 2 if wildcards.name == "two" else 1
    resources: mem_mb=lambda wildcards: 1500 if wildcards.name == "big" else 100
    shell: "cat /proc/$PPID/cmdline | tr '\\\\0' ' ' > {output}"
"""


def test_library_calls_only_for_jobs_that_fit_a_slot(workflow):
    wf = workflow(LIBRARY_SNAKEFILE)
    wf.run(
        "--taskvine-library",
        "--taskvine-worker-cores",
        "2",
        "--taskvine-worker-memory-mb",
        "2000",
        timeout=240,
        check=True,
    )
    parent = {name: (wf.root / "out" / f"{name}.txt").read_text() for name in ("one", "two", "big")}
    assert "library_code.py" in parent["one"], parent
    assert "library_code.py" not in parent["two"] and "library_code.py" not in parent["big"], parent


def test_call_fits():
    assert call_fits(1, 900, 1000) and call_fits(1, 5000, 0)
    assert not call_fits(2, 100, 1000) and not call_fits(1, 1001, 1000)


def test_a_final_line_break_is_refused(tmp_path, monkeypatch):
    """`$` matches before a final line break, so "rack-a\\n" would pass a `^...$` pattern; every pattern ends in \\Z."""
    for pattern in (
        taskvine.SAFE_NAME,
        taskvine.SAFE_PATH,
        taskvine.SAFE_REQUIREMENTS,
        taskvine.SAFE_HOST,
        taskvine.ENV_NAME,
        taskvine.ENV_PATTERN,
    ):
        assert pattern.match("a") and not pattern.match("a\n"), pattern.pattern
    groups = tmp_path / "groups.yaml"
    groups.write_text('worker_groups:\n  - {name: "rack-a\\n"}\n  - {name: b, condor_requirements: "Cpus > 1\\n"}\n')
    found = "\n".join(validation.problems(settings(worker_groups=groups)))
    assert "worker_groups[0] name 'rack-a\\n'" in found and "group 'b': condor_requirements" in found, found


def test_hostile_hosts_are_refused_before_anything_starts(tmp_path, monkeypatch, marker):
    """The manager's host (from HTCondor's configuration) and the catalog's ($CATALOG_HOST) reach vine_factory's and
    vine_worker's command lines."""
    with pytest.raises(ValueError, match="manager host"):
        taskvine.Factory(
            batch_type="local", manager_host=f"h;touch {MARKER}", manager_port=1, scratch_dir=tmp_path / "f"
        )
    with pytest.raises(ValueError, match="manager host"):
        taskvine.Worker(manager_host=f"$(touch {MARKER})", manager_port=1, workspace=tmp_path / "w")
    monkeypatch.setenv("CATALOG_HOST", f"`touch {MARKER}`")
    with pytest.raises(ValueError, match="CATALOG_HOST"):
        taskvine.catalog_address()
    monkeypatch.setenv("CATALOG_HOST", "[::1]:9097")
    assert taskvine.catalog_address() == "[::1]:9097"
