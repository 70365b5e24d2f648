"""``hepvine submit``'s pure parts: the campaign named in the snakemake arguments, the submit description (its
arguments and environment in HTCondor's syntax, an allow-list of the environment), and the campaign's progress read
incrementally from results/ (``hepvine.products.progress``). On the real pool:
tests/sandbox/test_submitted_campaigns.py."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from hepvine.commands import cli
from hepvine.commands.controller import dry_run, remove_stale_locks
from hepvine.commands.submit import SubmitError, campaign_of, credential_notes, description, quoted_arguments
from hepvine.products import progress


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["--profile", "profiles/sandbox", "--config", "dataset=d.json", "campaign=run1"], "run1"),
        (["--config", "campaign=a", "--cores", "2", "-C", "campaign=b"], "b"),
        (["--config=campaign=c", "--cores", "2"], "c"),
        (["-Ccampaign=d", "x=1"], "d"),
        (["--config", "campaign=a", "campaign=e"], "e"),
    ],
)
def test_the_campaign_is_read_as_snakemake_reads_config(args, name):
    assert campaign_of(args) == name


def test_a_campaign_must_be_named_and_a_word():
    with pytest.raises(SubmitError, match="name the campaign"):
        campaign_of(["--config", "dataset=d.json", "--campaign=x"])
    with pytest.raises(SubmitError, match="letters, digits"):
        campaign_of(["--config", "campaign=a b"])
    # A later --config replaces an earlier one (argparse), as Snakemake reads it: no campaign named then.
    with pytest.raises(SubmitError, match="name the campaign"):
        campaign_of(["--config", "campaign=a", "--cores", "2", "-C", "dataset=x"])
    for number in ("2018", "1e3", "1_000", "true", "3.5"):
        with pytest.raises(SubmitError, match="as a number or a boolean"):
            campaign_of(["--config", f"campaign={number}"])
    assert campaign_of(["--config", "campaign=run-2018"]) == "run-2018"


def test_a_dollar_is_no_macro_and_a_line_break_is_refused():
    assert parse_arguments(quoted_arguments(["$(HOME)", "a$b"])) == ["$(DOLLAR)(HOME)", "a$(DOLLAR)b"]
    with pytest.raises(SubmitError, match="line break"):
        quoted_arguments(["dataset=x\nqueue"])


def parse_arguments(value: str) -> list[str]:
    """HTCondor's new argument syntax read back, as condor_submit's manual gives it: a double-quoted whole in which
    "" is a double quote; words split at spaces; in single quotes spaces are kept and '' is a single quote."""
    assert value.startswith('"') and value.endswith('"')
    text, words, word, quoted, started, i = value[1:-1].replace('""', '"'), [], "", False, False, 0
    while i < len(text):
        c = text[i]
        if quoted and c == "'" and text[i + 1 : i + 2] == "'":
            word, i = word + "'", i + 2
            continue
        if c == "'":
            quoted, started = not quoted, True
        elif c == " " and not quoted:
            if started:
                words.append(word)
            word, started = "", False
        else:
            word, started = word + c, True
        i += 1
    if started:
        words.append(word)
    return words


def test_arguments_survive_htcondors_quoting():
    args = ["--config", "analysis_args={pt_min: 25.0}", "it's", 'say "x"', "", "plain"]
    assert parse_arguments(quoted_arguments(args)) == args


def test_the_description_runs_the_controller_with_the_same_arguments_and_an_allowed_environment(tmp_path):
    environ = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/u",
        "CONDOR_CONFIG": "/etc/condor/condor_config",
        "X509_USER_PROXY": "/tmp/x509up_u1000",
        "HEPVINE_STATE_DIR": "/srv",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "BEARER_TOKEN": "eyJ-the-token",
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent",
    }
    args = ["--profile", "profiles/sandbox", "--config", "dataset=d.json", "campaign=run1", "analysis_args={a: 1}"]
    text = description("run1", args, tmp_path, environ, None)
    lines = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line and not line.startswith("#"))
    assert lines["universe"] == "local" and lines["initialdir"] == str(tmp_path)
    assert (lines["log"], lines["output"], lines["error"]) == tuple(
        f"results/run1/submit/campaign.{e}" for e in ("log", "out", "err")
    )
    argv = parse_arguments(lines["arguments"])
    assert argv[:4] == ["-m", "hepvine.commands.controller", "--job", "$(ClusterId).$(ProcId)"]
    assert argv[argv.index("--") + 1 :] == args
    env = dict(kv.split("=", 1) for kv in parse_arguments(lines["environment"]))
    assert env == {k: environ[k] for k in ("PATH", "HOME", "CONDOR_CONFIG", "X509_USER_PROXY", "HEPVINE_STATE_DIR")}
    assert "s3cr3t" not in text and "eyJ" not in text and lines["getenv"] == "false"
    assert lines["+HepvineCampaignDir"] == f'"{tmp_path / "results" / "run1"}"'
    assert lines["+HepvineFilesDone"] == "0" and lines["notification"] == "Never"
    assert text.rstrip().endswith("queue")
    mailed = description("run1", args, tmp_path, environ, "me@example.org")
    assert "notification = Complete\nnotify_user = me@example.org" in mailed


def test_submit_and_status_are_commands():
    assert {"submit", "status"} <= set(cli.COMMANDS)
    assert cli.command_main("submit").__module__ == "hepvine.commands.submit"
    assert cli.command_main("status").__module__ == "hepvine.commands.status"


def write_batch(out: Path, batch: str, records: list[dict]) -> Path:
    path = out / "files" / f"{batch}.pkl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"records": records, "output": {"big": list(range(10))}, "events": {}}))
    return path


def record(events: int, failed: bool = False) -> dict:
    return {"events": 0 if failed else events, "failure": {"class": "permanent"} if failed else None}


def test_progress_counts_each_batch_once_and_again_only_when_rewritten(tmp_path, monkeypatch):
    out = tmp_path / "results" / "c1"
    (out / "index").mkdir(parents=True)
    planned = [[f"f{i}", f"p{i}.root", f"a/000/00{i // 5}"] for i in range(10)]  # (fid, path, batch)
    (out / "index" / "expected.json").write_text(json.dumps({"files": planned}))
    assert progress.update(out, now=1000.0).line() == (
        "campaign c1: 0/10 files analysed, 0 failed, 0 events, rate n/a, ETA n/a"
    )
    write_batch(out, "a/000/000", [record(100), record(100, failed=True)])
    write_batch(out, "a/000/001", [record(50), record(50)])
    write_batch(out, "a/000/002", [record(70)])  # an earlier plan's batch, its file now in another: not counted
    reads = []
    real = progress._batch_counts
    monkeypatch.setattr(progress, "_batch_counts", lambda path: reads.append(path.name) or real(path))
    now = progress.update(out, now=1010.0)
    assert (now.total, now.ok, now.failed, now.events) == (10, 3, 1, 200)
    assert now.files_per_s == pytest.approx(0.4) and now.eta_s == pytest.approx(15.0)
    assert now.rate_hz == pytest.approx(20.0)
    assert sorted(reads) == ["000.pkl", "001.pkl"]
    reads.clear()
    assert progress.update(out, now=1020.0).ok == 3 and reads == []  # nothing new: nothing read
    # A rerun rewrites a batch (its failed file now ok): read again, counted once.
    rewritten = write_batch(out, "a/000/000", [record(100), record(100)])
    os.utime(rewritten, ns=(rewritten.stat().st_mtime_ns + 10**9,) * 2)
    now = progress.update(out, now=1030.0)
    assert (now.ok, now.failed, now.events) == (4, 0, 300) and reads == ["000.pkl"]
    assert now.job_attributes()["HepvineFilesDone"] == 4 and now.job_attributes()["HepvineFilesTotal"] == 10
    # The report, once newer than every batch, gives the verdict.
    (out / "report.json").write_text(json.dumps({"complete": False}))
    os.utime(out / "report.json", ns=(rewritten.stat().st_mtime_ns + 10**9,) * 2)
    assert progress.update(out, now=1040.0).line().endswith("300 events, incomplete")


def test_a_batch_being_written_is_read_at_the_next_update(tmp_path):
    out = tmp_path / "c2"
    torn = out / "files" / "b.pkl"
    torn.parent.mkdir(parents=True)
    torn.write_bytes(pickle.dumps({"records": [record(5)]})[:10])
    now = progress.update(out, now=1.0)
    assert (now.total, now.ok) == (None, 0) and "0/? files" in now.line()
    write_batch(out, "b", [record(5)])
    assert progress.update(out, now=2.0).ok == 1


def test_dry_runs_are_told_apart():
    assert dry_run(["-n"]) and dry_run(["-np", "--cores", "1"]) and dry_run(["--dry-run"])
    assert not dry_run(["--cores", "1", "--config", "campaign=n"]) and not dry_run(["-j", "4"])


def test_only_the_campaigns_own_stale_locks_are_removed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text(f"{tmp_path}/results/mine/index/a.json\n")
    (locks / "0.output.lock").write_text(f"{tmp_path}/results/mine/files/a.pkl\n")
    (locks / "1.input.lock").write_text(f"{tmp_path}/results/mine-2/index/a.json\n")
    (locks / "1.output.lock").write_text(f"{tmp_path}/results/mine-2/files/a.pkl\n")
    assert sorted(p.name for p in remove_stale_locks("mine")) == ["0.input.lock", "0.output.lock"]
    assert sorted(p.name for p in locks.iterdir()) == ["1.input.lock", "1.output.lock"]


def test_a_credential_the_session_would_take_away_is_said_at_submit(tmp_path):
    """A token given as $BEARER_TOKEN's value never reaches the controller, and a proxy or token under
    $XDG_RUNTIME_DIR is removed with the user's last session: both are said; a credential file elsewhere is not."""
    runtime, home = tmp_path / "run-user", tmp_path / "home"
    runtime.mkdir()
    home.mkdir()
    (runtime / "bt_u1234").write_text("token\n")
    (runtime / "x509up").write_text("proxy\n")
    (home / "bt").write_text("token\n")
    env = {"XDG_RUNTIME_DIR": str(runtime), "X509_USER_PROXY": str(runtime / "x509up")}
    notes = credential_notes(env, 1234)
    assert len(notes) == 2 and all("XDG_RUNTIME_DIR" in n for n in notes), notes
    assert str(runtime / "bt_u1234") in notes[0] and "BEARER_TOKEN_FILE" in notes[0]
    assert str(runtime / "x509up") in notes[1] and "X509_USER_PROXY" in notes[1]
    assert "BEARER_TOKEN_FILE" in credential_notes({"BEARER_TOKEN": "abc"}, 1234)[0]
    assert (
        credential_notes(
            {
                "XDG_RUNTIME_DIR": str(runtime),
                "BEARER_TOKEN_FILE": str(home / "bt"),
                "X509_USER_PROXY": str(home / "none"),
            },
            1234,
        )
        == []
    )
