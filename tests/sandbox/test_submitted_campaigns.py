"""``hepvine submit`` on the sandbox's HTCondor pool (issue 31): campaigns on the sandbox profile (TaskVine workers
that HTCondor runs, files read through the racks' XCaches) whose controller is a local-universe job.

- Two campaigns submitted at once from a session that is then killed whole both finish, complete and exact, each in
  its own directory (the second on the GSI site, reading with the user's proxy); their progress is in condor_q
  while they run; the job's exit code is 0 and its output ends with the summary; ``hepvine status`` says so.
- One campaign held mid-run (nothing of it left running), released (it resumes), removed mid-run (nothing of it
  left within 60 s, no worker job in the queue), refused while its controller is still queued, submitted again: it
  finishes with every file counted once, and exit code 3 for the one file that is not ROOT.

The analysis sleeps a little per file so that a run lasts long enough to be interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import uproot
from coffea import util
from credentialed import grid_proxy

pytestmark = [pytest.mark.sandbox, pytest.mark.pool]

REPO = Path(__file__).resolve().parents[2]
NANOAOD = REPO.parent / "shared" / "nanoaod"
SOURCES = ["nano_dimuon.root", "nano_dy.root", "ttH_M125_2017.root"]
COPIES = 8  # of each: 24 files, one a job (12 in each of the two campaigns submitted together)
SLOW_ANALYSIS = '''
import time


def slow(events):
    """Counts events and files; slowly, so that the campaign can be interrupted while it runs."""
    time.sleep(2.5)
    return {"events": len(events), "files": {events.metadata["filename"]: len(events)}}
'''


@pytest.fixture
def campaigns(services):
    """(tag, fileset writer): files served by the origin under a fresh directory, results/<tag>* removed after."""
    tag = f"test-submit-{uuid.uuid4().hex[:8]}"
    origin = services["xrootd"]["origin"]
    store = Path(origin["data_dir"]) / "store" / tag
    store.mkdir(parents=True)
    expected = {}
    for k in range(COPIES):
        for name in SOURCES:
            copy = f"{k}-{name}"
            shutil.copy(NANOAOD / name, store / copy)
            with uproot.open(store / copy) as f:
                expected[f"{origin['url']}//store/{tag}/{copy}"] = f["Events"].num_entries
    inputs = REPO / "results" / tag
    inputs.mkdir(parents=True)
    (inputs / "slow.py").write_text(SLOW_ANALYSIS)

    def fileset(broken: bool = False, copies: int = COPIES) -> tuple[Path, dict[str, int]]:
        """A fileset of COPIES copies of each source (and with BROKEN a file that is not ROOT); its files' events."""
        chosen = {url: n for url, n in expected.items() if int(url.rsplit("/", 1)[1].split("-")[0]) < copies}
        files = {url: "Events" for url in chosen}
        if broken:
            (store / "broken.root").write_bytes(b"not a ROOT file" * 100)
            files[f"{origin['url']}//store/{tag}/broken.root"] = "Events"
        path = inputs / f"fileset{'-broken' if broken else ''}.json"
        path.write_text(json.dumps({"mixed": {"files": files}}))
        return path, chosen

    yield tag, fileset
    shutil.rmtree(store, ignore_errors=True)
    for path in (REPO / "results").glob(f"{tag}*"):
        shutil.rmtree(path, ignore_errors=True)


def args(tag: str, name: str, dataset: Path, site: str = "sandbox") -> list[str]:
    return [
        "--profile",
        f"profiles/{site}",
        "--config",
        f"dataset={dataset.relative_to(REPO)}",
        f"campaign={name}",
        f"analysis=results/{tag}/slow.py:slow",
        f"site=site-configs/{site}.yaml",
        "files_per_job=1",
    ]


def hepvine(*argv: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hepvine.commands.cli", *argv], cwd=REPO, capture_output=True, text=True, env=env
    )


def job_ad(cluster: str, env: dict, *attrs: str) -> list[str] | None:
    """ATTRS of job CLUSTER.0 while it is in the queue; None once it has left."""
    out = subprocess.run(
        ["condor_q", cluster, "-af", *attrs], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return out or None


def wait_for(what: str, condition, timeout_s: float, every_s: float = 1.0, explain=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s {explain()}")


def leftovers(name: str) -> list[str]:
    """Processes of campaign NAME (its controller, snakemake, its jobs) or of TaskVine (the test runs alone)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = " ".join(a.decode(errors="replace") for a in argv)
        if (
            f"campaign={name}" in text
            or f"--campaign {name}" in text
            or Path(argv[0].decode() or "x").name
            in (
                "vine_worker",
                "vine_factory",
            )
        ):
            found.append(f"{proc.name}: {text[:200]}")
    return found


def worker_jobs(env: dict) -> list[str]:
    """Jobs in the queue that are not a campaign's controller (the factories' worker jobs)."""
    out = subprocess.run(
        ["condor_q", "-constraint", "HepvineCampaign =?= undefined", "-af", "ClusterId"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    return out.split()


def ended(cluster: str, log: Path, env: dict) -> tuple[int, int]:
    """(JobStatus, ExitCode) of job CLUSTER.0 from its user log once it has left the queue."""
    out = subprocess.run(
        ["condor_history", cluster, "-limit", "1", "-af", "JobStatus", "ExitCode", "-userlog", str(log)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1]) if len(out) > 1 and out[1] != "undefined" else -1


def check_exact(out: Path, expected: dict[str, int], failed: list[str] = ()) -> dict:
    """The campaign's report and output: every file counted exactly once, its events as uproot counts them."""
    report = json.loads((out / "report.json").read_text())
    assert report["files"] == {
        "total": len(expected) + len(failed),
        "ok": len(expected),
        "failed": len(failed),
    }, report["failed_files"]
    assert not any(report["accounting"][k] for k in ("missing", "duplicated", "unexpected")), report["accounting"]
    assert [f["path"] for f in report["failed_files"]] == list(failed)
    merged = util.load(str(out / "output.coffea"))
    assert merged["files"] == expected and merged["events"] == sum(expected.values())
    return report


def test_campaigns_submitted_from_a_killed_session_finish_complete_and_exact(campaigns, condor_env, services, tmp_path):
    """The second campaign is on the sandbox's GSI site: its controller finds the user's proxy (its variable is in
    the controller's allowed environment) and its tasks read through the GSI caches with it."""
    tag, fileset = campaigns
    names = [f"{tag}-a", f"{tag}-b"]
    sites = ["sandbox", "sandbox-gsi"]
    dataset, expected = fileset(copies=4)
    # A login session: its own session and process group, which submits both and then is killed whole.
    submits = " && ".join(
        f"{sys.executable} -m hepvine.commands.cli submit --progress-every 2 {' '.join(args(tag, n, dataset, site))}"
        for n, site in zip(names, sites)
    )
    session = subprocess.Popen(
        ["sh", "-c", f"{submits} && echo SUBMITTED && sleep 600"],
        cwd=REPO,
        env={**condor_env, "X509_USER_PROXY": grid_proxy(services, tmp_path / "x509up", hours=4)},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    printed = []
    for line in session.stdout:
        printed.append(line)
        if line.strip() == "SUBMITTED":
            break
    os.killpg(session.pid, signal.SIGKILL)  # the session's every process
    session.wait()
    clusters = [line.split("HTCondor job ")[1].split(".")[0] for line in printed if "HTCondor job" in line]
    assert len(clusters) == 2, printed
    assert "hepvine status" in "".join(printed) and "condor_rm" in "".join(printed)

    seen: dict[str, set[tuple[int, int]]] = {c: set() for c in clusters}

    def both_gone() -> bool:
        for cluster in clusters:
            ad = job_ad(cluster, condor_env, "HepvineFilesDone", "HepvineFilesTotal")
            if ad is not None:
                seen[cluster].add((int(ad[0]), int(ad[1])))
        return all(job_ad(c, condor_env, "ClusterId") is None for c in clusters)

    wait_for("both campaigns to finish", both_gone, 900, every_s=1)
    for cluster, name in zip(clusters, names):
        out = REPO / "results" / name
        # Progress while it ran: counts between none and all of its files, as condor_q showed them.
        assert any(0 < done < len(expected) and total == len(expected) for done, total in seen[cluster]), seen
        assert ended(cluster, out / "submit" / "campaign.log", condor_env) == (4, 0)
        assert "hepvine campaign results/" in (out / "submit" / "campaign.out").read_text()
        report = check_exact(out, expected)
        site = "caches_gsi" if name.endswith("-b") else "caches"
        caches = tuple(c["url"] for c in services["xrootd"][site].values())
        assert all(r["read_from"].startswith(caches) for r in report["inputs"]), report["inputs"][0]["read_from"]
        status = hepvine("status", name, env=condor_env)
        assert status.returncode == 0, status.stderr
        assert (
            f"campaign {name}: {len(expected)}/{len(expected)} files analysed, 0 failed" in status.stdout
            and "complete" in status.stdout
        )
        assert f"controller: HTCondor job {cluster}.0 ended, exit code 0" in status.stdout
        # The two never shared a directory.
        assert (out / "submit" / "campaign.sub").read_text().count(f"campaign={name}") == 1


@pytest.mark.alone
def test_a_campaign_held_released_removed_and_submitted_again_counts_each_file_once(campaigns, condor_env):
    tag, fileset = campaigns
    name = f"{tag}-c"
    out = REPO / "results" / name
    dataset, expected = fileset(broken=True)
    argv = args(tag, name, dataset)
    bad = [url for url in json.loads(dataset.read_text())["mixed"]["files"] if "broken" in url]

    def submit() -> str:
        done = hepvine("submit", "--progress-every", "2", *argv, env=condor_env)
        assert done.returncode == 0, done.stderr
        return done.stdout.split("HTCondor job ")[1].split(".")[0]

    def files_done(cluster: str) -> int:
        ad = job_ad(cluster, condor_env, "HepvineFilesDone")
        return int(ad[0]) if ad else -1

    def left() -> str:
        return f"(left: {leftovers(name)}; worker jobs in the queue: {worker_jobs(condor_env)})"

    cluster = submit()
    wait_for("a few files done", lambda: files_done(cluster) >= 3, 300)
    subprocess.run(["condor_hold", cluster], env=condor_env, check=True, capture_output=True)
    began = time.monotonic()
    wait_for("held", lambda: job_ad(cluster, condor_env, "JobStatus") == ["5"], 60)
    wait_for("nothing of it running", lambda: not leftovers(name) and not worker_jobs(condor_env), 60, explain=left)
    assert time.monotonic() - began < 60
    held_at = files_done(cluster)
    assert not (out / "report.json").exists(), "the campaign finished before it could be held: make it slower"
    assert "held" in hepvine("status", name, env=condor_env).stdout

    subprocess.run(["condor_release", cluster], env=condor_env, check=True, capture_output=True)
    wait_for("resumed past where it was held", lambda: files_done(cluster) > held_at, 300)
    refused = hepvine("submit", *argv, env=condor_env)
    assert refused.returncode == 2 and f"already has a controller in the queue (job {cluster}.0)" in refused.stderr
    subprocess.run(["condor_rm", cluster], env=condor_env, check=True, capture_output=True)
    began = time.monotonic()
    wait_for(
        "nothing of it left",
        lambda: (
            job_ad(cluster, condor_env, "ClusterId") is None and not leftovers(name) and not worker_jobs(condor_env)
        ),
        60,
        explain=left,
    )
    assert time.monotonic() - began < 60
    assert not (out / "report.json").exists(), "the campaign finished before it could be removed: make it slower"
    assert ended(cluster, out / "submit" / "campaign.log", condor_env)[0] == 3  # removed

    again = submit()
    wait_for("the resubmitted campaign to finish", lambda: job_ad(again, condor_env, "ClusterId") is None, 900)
    assert ended(again, out / "submit" / "campaign.log", condor_env) == (4, 3)  # incomplete: one file is not ROOT
    assert "is incomplete" in (out / "submit" / "campaign.out").read_text()
    report = check_exact(out, expected, failed=bad)
    assert report["failed_files"][0]["kind"] == "not-root"


def test_htcondor_hands_the_controller_its_arguments_and_environment_as_written(tmp_path, condor_env):
    """The submit description's quoting (hepvine.commands.submit.quoted_arguments) read back by HTCondor itself: a
    local-universe job prints the arguments and the variable it was given."""
    from hepvine.commands.submit import quoted_arguments

    tricky = ["a b", "it's", 'say "x"', "", "$(HOME)", "{pt_min: 25.0}", "--config=campaign=x"]
    code = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('TRICKY')]))"
    (tmp_path / "echo.sub").write_text(
        "universe = local\n"
        f"executable = {sys.executable}\n"
        f"arguments = {quoted_arguments(['-c', code, *tricky])}\n"
        f"environment = {quoted_arguments(['TRICKY=' + ' '.join(tricky)])}\n"
        f"output = {tmp_path}/echo.out\nerror = {tmp_path}/echo.err\nlog = {tmp_path}/echo.log\nqueue\n"
    )
    subprocess.run(["condor_submit", str(tmp_path / "echo.sub")], env=condor_env, check=True, capture_output=True)
    subprocess.run(
        ["condor_wait", "-wait", "120", str(tmp_path / "echo.log")], env=condor_env, check=True, capture_output=True
    )
    assert json.loads((tmp_path / "echo.out").read_text()) == [tricky, " ".join(tricky)]
