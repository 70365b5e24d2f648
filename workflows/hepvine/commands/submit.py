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

SUB = "campaign.sub"
CLUSTER = "cluster"  # the last submitted controller's cluster id, for `hepvine status`
# The controller's environment, names and NAME* prefixes: paths and the Python environment, the locations (never
# the values) of X.509 proxies and tokens, XRootD's and TaskVine's catalog settings, HTCondor's client settings (it
# submits the workers), hepvine's own. The plugin gives the workers their own allow-list (--taskvine-worker-env).
CONTROLLER_ENV = (
    *("PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TZ", "TMPDIR"),
    *("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "PYTHONHOME"),
    *("X509_USER_PROXY", "X509_CERT_DIR", "X509_VOMS_DIR", "X509_VOMSES", "BEARER_TOKEN_FILE", "XDG_RUNTIME_DIR"),
    *("SSL_CERT_FILE", "SSL_CERT_DIR", "XRD_*", "XrdSec*", "CATALOG_HOST", "CATALOG_PORT"),
    *("CONDOR_CONFIG", "HEPVINE_*"),
)
# condor_rm / condor_hold send SIGTERM; the controller hands it to Snakemake as Ctrl-C and the run stops its
# workers (a factory's stop takes up to 30 s). HTCondor sends SIGKILL to what is left after this many seconds.
STOP_GRACE_S = 50
CAMPAIGN_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


class SubmitError(Exception):
    """What stops a submit, with what to do."""


def campaign_of(snakemake_args: list[str]) -> str:
    """The campaign that ``--config campaign=<name>`` names in SNAKEMAKE_ARGS (Snakemake's syntax: ``--config``
    (or ``-C``) followed by key=value words up to the next option)."""
    name = None
    in_config = False
    for word in snakemake_args:
        if word in ("--config", "-C"):
            in_config = True
        elif word.startswith("-"):
            in_config = False
        elif in_config and word.startswith("campaign="):
            name = word.partition("=")[2]
        if word.startswith("--config=") and word[len("--config=") :].startswith("campaign="):
            name = word.partition("=")[2].partition("=")[2]
    if name is None:
        raise SubmitError(
            "hepvine submit: name the campaign (--config ... campaign=<name>): a submitted campaign has its own "
            "results/<name>/ and job directory, and is resumed by name"
        )
    if not CAMPAIGN_NAME.match(name):
        raise SubmitError(f"hepvine submit: campaign={name!r}: use letters, digits and _ . - only")
    return name


def controller_environment(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ENVIRON that CONTROLLER_ENV allows."""
    names = {n for n in CONTROLLER_ENV if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in CONTROLLER_ENV if n.endswith("*"))
    return {k: v for k, v in environ.items() if k in names or k.startswith(prefixes)}


def quoted_arguments(args: list[str]) -> str:
    """ARGS in the submit language's new argument syntax: the whole in double quotes, each argument that holds a
    space or a quote in single quotes, a single quote doubled, a double quote doubled."""

    def one(arg: str) -> str:
        arg = arg.replace('"', '""')
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
    controller = ["-m", "hepvine.commands.controller", "--job", "$(ClusterId).$(ProcId)", "--campaign", campaign]
    controller += ["--every", f"{progress_every_s:g}"]
    lines = [
        f"# hepvine campaign {campaign}: its controller, `python -m snakemake` with the arguments below, as an",
        "# HTCondor local-universe job on this access point (it goes on when the session that submitted it ends).",
        f"# Written by `hepvine submit` on {time.strftime('%Y-%m-%d %H:%M:%S %Z')}. `condor_submit {job_dir}/{SUB}`",
        "# (from the initialdir) submits it again: the campaign resumes where it stopped.",
        "universe = local",
        f"executable = {sys.executable}",
        f"arguments = {quoted_arguments([*controller, '--', *snakemake_args])}",
        f"initialdir = {workdir}",
        f"log = {job_dir}/campaign.log",
        f"output = {job_dir}/campaign.out",
        f"error = {job_dir}/campaign.err",
        f"batch_name = hepvine-{campaign}",
        "# An allow-list of the submitting shell's environment (every pool user can read it in the job's ad).",
        "getenv = false",
        f"environment = {quoted_arguments([f'{k}={v}' for k, v in sorted(environment.items())])}",
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


def in_queue(campaign_dir: Path) -> list[str]:
    """'cluster.proc' of each controller of CAMPAIGN_DIR in the schedd's queue."""
    out = subprocess.run(
        ["condor_q", "-constraint", f'HepvineCampaignDir == "{campaign_dir}"', "-af", "ClusterId", "ProcId"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise SubmitError(f"hepvine submit: condor_q failed (is the schedd up?): {out.stderr.strip()}")
    return [".".join(line.split()) for line in out.stdout.splitlines() if line.strip()]


def submit(
    snakemake_args: list[str],
    notify_user: str | None = None,
    progress_every_s: float = EVERY_S,
    workdir: Path | None = None,
) -> tuple[str, Path]:
    """Submit the controller of the campaign SNAKEMAKE_ARGS name; (its cluster id, its submit description)."""
    workdir = (workdir or Path.cwd()).resolve()
    campaign = campaign_of(snakemake_args)
    if notify_user is not None and not re.fullmatch(r"[^\s@\"']+@[^\s@\"']+", notify_user):
        raise SubmitError(f"hepvine submit: --notify-user {notify_user!r} is not an e-mail address")
    running = in_queue(workdir / "results" / campaign)
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
    out = subprocess.run(["condor_submit", "-terse", SUB], cwd=job_dir, capture_output=True, text=True, timeout=60)
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
    try:
        cluster, sub = submit(snakemake_args, args.notify_user, args.progress_every)
    except SubmitError as e:
        print(e, file=sys.stderr)
        return 2
    campaign = campaign_of(snakemake_args)
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
