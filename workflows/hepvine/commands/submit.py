"""``hepvine submit <snakemake arguments>``: a campaign's controller submitted as an HTCondor local-universe job on
this access point, so that the campaign outlives the session that started it (DAGMan's model).

The arguments are those of the campaign's ``snakemake`` command (``--profile profiles/sandbox --config dataset=...
campaign=<name> ...``); ``campaign`` must be named. The job's directory is ``results/<campaign>/submit/``: the
submit description ``campaign.sub`` (readable; ``condor_submit`` it again to resume the campaign), and the job's
``campaign.log``, ``.out`` (Snakemake's output, ending with the campaign's summary) and ``.err``. The controller
(``hepvine.commands.controller``) runs ``python -m snakemake`` with those arguments from the directory the submit was
made in, keeps progress attributes in its job ad, hands ``condor_rm``/``condor_hold`` to Snakemake as Ctrl-C, and
exits 0 only for a complete campaign. Its environment is an allow-list of the submitting shell's (paths and
settings; no secrets: every pool user can read a job's ``Environment``). A campaign that has a controller in the
queue is not submitted again.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hepvine.commands.controller import EVERY_S
from hepvine.products.progress import Progress
from hepvine.reading import credentials

SUB = "campaign.sub"
CLUSTER = "cluster"  # the last submitted controller's cluster id, for `hepvine status`
# The controller's environment, names and NAME* prefixes: paths and the Python environment, the locations (never
# the values) of X.509 proxies, tokens and Kerberos caches, XRootD's and TaskVine's catalog settings, HTCondor's
# client settings (it submits the workers: CONDOR_CONFIG and _CONDOR_* overrides), hepvine's own. The plugin gives
# the workers their own allow-list (--taskvine-worker-env).
CONTROLLER_ENV = (
    *("PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TZ", "TMPDIR"),
    *("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "PYTHONHOME"),
    *("X509_USER_PROXY", "X509_CERT_DIR", "X509_VOMS_DIR", "X509_VOMSES", "BEARER_TOKEN_FILE", "XDG_RUNTIME_DIR"),
    *("SSL_CERT_FILE", "SSL_CERT_DIR", "XRD_*", "XrdSec*", "CATALOG_HOST", "CATALOG_PORT"),
    *("KRB5CCNAME", "CONDOR_CONFIG", "_CONDOR_*", "HEPVINE_*"),
)
# condor_rm / condor_hold send SIGTERM; the controller hands it to Snakemake as Ctrl-C and the run stops its
# workers (a factory's stop takes up to 30 s). HTCondor sends SIGKILL to what is left after this many seconds.
STOP_GRACE_S = 50
CONDOR_TIMEOUT_S = 60
CAMPAIGN_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


class SubmitError(Exception):
    """What stops a submit, with what to do."""


def config_words(snakemake_args: list[str]) -> list[str]:
    """The key=value words of the last ``--config``/``-C`` in SNAKEMAKE_ARGS: Snakemake reads the option with argparse
    (``nargs="*"``), so a later one replaces an earlier one, and its words run up to the next option."""
    words: list[str] | None = None
    collecting = False
    for word in snakemake_args:
        if word in ("--config", "-C"):
            words, collecting = [], True
        elif word.startswith("--config=") or (word.startswith("-C") and not word.startswith("--")):
            words, collecting = [word.split("=", 1)[1] if word.startswith("--config=") else word[2:]], True
        elif word.startswith("-"):
            collecting = False
        elif collecting:
            words.append(word)
    return words or []


def campaign_of(snakemake_args: list[str]) -> str:
    """The campaign that ``--config ... campaign=<name>`` names in SNAKEMAKE_ARGS, as Snakemake will read it."""
    names = [w.partition("=")[2] for w in config_words(snakemake_args) if w.startswith("campaign=")]
    if not names:
        raise SubmitError(
            "hepvine submit: name the campaign (--config ... campaign=<name>): a submitted campaign has its own "
            "results/<name>/ and job directory, and is resumed by name"
        )
    name = names[-1]
    if not CAMPAIGN_NAME.match(name):
        raise SubmitError(f"hepvine submit: campaign={name!r}: use letters, digits and _ . - only")
    if re.fullmatch(r"[-+]?(\d[\d_]*)?\.?\d*([eE][-+]?\d+)?|true|false|True|False|null|None", name):
        raise SubmitError(
            f"hepvine submit: campaign={name}: Snakemake would read it as a number or a boolean, not a name; give "
            "e.g. run-2018"
        )
    return name


def safe_value(value: str, what: str) -> str:
    """VALUE for a submit description: a line break would end the line (and start a command of its own), so it
    is refused; a $ would start an HTCondor macro, so it is written as $(DOLLAR)."""
    if "\n" in value or "\r" in value:
        raise SubmitError(f"hepvine submit: {what} holds a line break; a submit description cannot carry it")
    return value.replace("$", "$(DOLLAR)")


def controller_environment(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ENVIRON that CONTROLLER_ENV allows."""
    names = {n for n in CONTROLLER_ENV if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in CONTROLLER_ENV if n.endswith("*"))
    return {k: v for k, v in environ.items() if k in names or k.startswith(prefixes)}


def quoted_arguments(args: list[str], what: str = "an argument") -> str:
    """ARGS in the submit language's new argument syntax: the whole in double quotes, each argument that holds a
    space or a quote in single quotes, a single quote doubled, a double quote doubled (and safe_value's rules)."""

    def one(arg: str) -> str:
        arg = safe_value(arg, f"{what} {arg[:40]!r}").replace('"', '""')
        if not arg or any(c in arg for c in " \t'"):
            return "'" + arg.replace("'", "''") + "'"
        return arg

    return '"' + " ".join(one(a) for a in args) + '"'


def description(
    campaign: str,
    snakemake_args: list[str],
    workdir: Path,
    environ: dict[str, str],
    notify_user: str | None,
    progress_every_s: float = EVERY_S,
) -> str:
    """The controller's submit description (paths relative to WORKDIR, its initialdir)."""
    job_dir = f"results/{campaign}/submit"
    environment = controller_environment(environ)
    # The job's own id as HTCondor's macros (every other $ is escaped), then the controller's arguments.
    controller = (
        '"-m hepvine.commands.controller --job $(ClusterId).$(ProcId) '
        + quoted_arguments(["--campaign", campaign, "--every", f"{progress_every_s:g}", "--", *snakemake_args])[1:]
    )
    lines = [
        f"# hepvine campaign {campaign}: its controller, `python -m snakemake` with the arguments below, as an",
        "# HTCondor local-universe job on this access point (it goes on when the session that submitted it ends).",
        f"# Written by `hepvine submit` on {time.strftime('%Y-%m-%d %H:%M:%S %Z')}. `condor_submit {job_dir}/{SUB}`",
        "# (from the initialdir) submits it again: the campaign resumes where it stopped.",
        "universe = local",
        f"executable = {sys.executable}",
        f"arguments = {controller}",
        f"initialdir = {workdir}",
        f"log = {job_dir}/campaign.log",
        f"output = {job_dir}/campaign.out",
        f"error = {job_dir}/campaign.err",
        f"batch_name = hepvine-{campaign}",
        "# An allow-list of the submitting shell's environment (every pool user can read it in the job's ad).",
        "getenv = false",
        f"environment = {quoted_arguments([f'{k}={v}' for k, v in sorted(environment.items())], 'a variable')}",
        "# condor_rm and condor_hold: SIGTERM, which the controller hands to Snakemake as Ctrl-C (its jobs cancelled,",
        f"# its workers removed); SIGKILL to whatever is left after {STOP_GRACE_S} s.",
        "kill_sig = SIGTERM",
        f"job_max_vacate_time = {STOP_GRACE_S}",
        f'+HepvineCampaign = "{campaign}"',
        f'+HepvineCampaignDir = "{workdir / "results" / campaign}"',
        *(f"+{k} = {v}" for k, v in Progress.nothing_yet(campaign).job_attributes().items()),
    ]
    if notify_user:
        lines += ["notification = Complete", f"notify_user = {notify_user}"]
    else:
        lines.append("notification = Never")
    return "\n".join(lines + ["queue", ""])


def condor_tool(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run an HTCondor command-line tool; a SubmitError naming it when it is not installed or does not answer."""
    try:
        return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=CONDOR_TIMEOUT_S)
    except FileNotFoundError:
        raise SubmitError(
            f"hepvine: HTCondor's {argv[0]} is not on PATH: run this on an HTCondor access point (one with a schedd)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"hepvine: {argv[0]} did not answer within {CONDOR_TIMEOUT_S} s: is the schedd up?") from None


def controllers(campaign_dir: Path) -> list[tuple[str, int, str]]:
    """(cluster.proc, JobStatus, HoldReason) of each controller of CAMPAIGN_DIR in the schedd's queue."""
    out = condor_tool(
        "condor_q",
        "-constraint",
        f'HepvineCampaignDir == "{campaign_dir}"',
        "-af:t",
        "ClusterId",
        "ProcId",
        "JobStatus",
        "HoldReason",
    )
    if out.returncode != 0:
        raise SubmitError(f"hepvine: condor_q failed (is the schedd up?): {out.stderr.strip()}")
    found = []
    for line in out.stdout.splitlines():
        cluster, proc, status, reason = (line.split("\t") + [""] * 4)[:4]
        if cluster.strip():
            found.append((f"{cluster}.{proc}", int(status), "" if reason == "undefined" else reason))
    return found


def credential_notes(environ: dict[str, str], uid: int) -> list[str]:
    """What the submitted controller would lose of the user's credential (found in ENVIRON, user UID) once the
    session that submits it ends: a token given as ``$BEARER_TOKEN``'s value (no job gets it: every pool user can
    read a job's environment), or a proxy or token under ``$XDG_RUNTIME_DIR`` (removed with the user's last session
    on this machine). The campaign would then stop dispatching at its next task, asking for a renewal."""
    notes = []
    if environ.get("BEARER_TOKEN", "").strip():
        notes.append(
            "$BEARER_TOKEN holds a token, and a submitted campaign gets no secret in its environment (every pool user "
            "can read a job's): write it to a file only you can read and set BEARER_TOKEN_FILE to it "
            "(htgettoken -o <file>)"
        )
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if not runtime:
        return notes
    token_file, token_source = credentials.token_location({**environ, "BEARER_TOKEN": ""}, uid)
    proxy_file, proxy_source = credentials.proxy_location(environ, uid)
    for what, path, source, variable in (
        ("token", token_file, token_source, "BEARER_TOKEN_FILE"),
        ("proxy", proxy_file, proxy_source, "X509_USER_PROXY"),
    ):
        if path is not None and path.exists() and path.absolute().is_relative_to(Path(runtime)):
            notes.append(
                f"your {what} {path} ({source}) is under $XDG_RUNTIME_DIR, which is removed when your last session "
                f"on this machine ends: the campaign would then stop at its next task asking for a renewal. Keep it "
                f"in a file that outlives the session (only yours, mode 0600) and set {variable} to it, and renew it "
                "there while the campaign runs"
            )
    return notes


def submit(
    snakemake_args: list[str],
    notify_user: str | None = None,
    progress_every_s: float = EVERY_S,
    workdir: Path | None = None,
) -> tuple[str, Path]:
    """Submit the controller of the campaign SNAKEMAKE_ARGS name; (its cluster id, its submit description)."""
    workdir = (workdir or Path.cwd()).resolve()
    if any(c in str(workdir) for c in '"\\\n\r$'):
        raise SubmitError(
            f'hepvine submit: run it from a directory whose path has no ", \\, $ or line break: {workdir}'
        )
    campaign = campaign_of(snakemake_args)
    if notify_user is not None and not re.fullmatch(r"[A-Za-z0-9_.+@-]+", notify_user):
        raise SubmitError(
            f"hepvine submit: --notify-user {notify_user!r}: give an e-mail address or a user name (letters, digits "
            "and _ . + @ -)"
        )
    running = [job for job, _, _ in controllers(workdir / "results" / campaign)]
    if running:
        raise SubmitError(
            f"hepvine submit: campaign {campaign} already has a controller in the queue (job {', '.join(running)}); "
            f"follow it with `hepvine status {campaign}`, or stop it with `condor_rm {running[0]}` and submit again "
            "once it has left the queue"
        )
    job_dir = workdir / "results" / campaign / "submit"
    job_dir.mkdir(parents=True, exist_ok=True)
    sub = job_dir / SUB
    sub.write_text(description(campaign, snakemake_args, workdir, dict(os.environ), notify_user, progress_every_s))
    out = condor_tool("condor_submit", "-terse", SUB, cwd=job_dir)
    if out.returncode != 0:
        raise SubmitError(f"hepvine submit: condor_submit {sub} failed: {out.stderr.strip() or out.stdout.strip()}")
    cluster = out.stdout.split()[0].split(".")[0]
    (job_dir / CLUSTER).write_text(cluster + "\n")
    return cluster, sub


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hepvine submit",
        description=__doc__.split("\n\n")[0],
        usage="hepvine submit [--notify-user ADDRESS] [--progress-every S] <the campaign's snakemake arguments>",
        allow_abbrev=False,
        epilog="Every other argument is the campaign's snakemake's, passed on as given: --profile <dir>, --config "
        "dataset=<spec> campaign=<name> ..., any other snakemake option. campaign must be named.",
    )
    parser.add_argument("--notify-user", help="e-mail HTCondor's note to this address when the campaign ends")
    parser.add_argument(
        "--progress-every",
        type=float,
        default=EVERY_S,
        metavar="S",
        help=f"seconds between updates of the job's progress attributes (default {EVERY_S:g})",
    )
    args, snakemake_args = parser.parse_known_args(argv)
    if args.progress_every < 1:
        parser.error(f"--progress-every {args.progress_every:g}: give at least 1 (seconds)")
    for note in credential_notes(dict(os.environ), os.getuid()):
        print(f"hepvine submit: warning: {note}", file=sys.stderr)
    try:
        cluster, sub = submit(snakemake_args, args.notify_user, args.progress_every)
    except SubmitError as e:
        print(e, file=sys.stderr)
        return 2
    campaign = sub.parent.parent.name
    print(
        f"campaign {campaign} submitted: HTCondor job {cluster}.0 (local universe; {sub})\n"
        f"  progress:  hepvine status {campaign}    (or condor_q {cluster} -af HepvineFilesDone HepvineFilesTotal)\n"
        f"  output:    {sub.parent / 'campaign.out'}, {sub.parent / 'campaign.err'}\n"
        f"  stop:      condor_rm {cluster}    pause: condor_hold {cluster}, then condor_release {cluster}\n"
        "  resume:    hepvine submit with the same arguments"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
