"""What the tests of campaigns over the sandbox's authenticating services share (tests/sandbox/test_gsi.py,
test_tokens.py; test_rucio.py uses the processor): a processor that holds each file until a wall-clock time (so that a
credential can be made to expire while tasks are still to be handed out) or until the test says, and a campaign over a
fileset on a sandbox site's profile whose workers have no credential of their own."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from hepvine.devtools import proxies

REPO = Path(__file__).resolve().parents[1]
FILES = 8  # twice the sandbox pool's worker cores: the second half is handed out after the first has run

# With the sandbox's four worker cores busy until UNTIL, every later task is handed out after it; or, given a GATE
# (a path the workers see), until the test makes that file, UNTIL then only a bound.
GATED_ANALYSIS = """
import os
import time

import awkward as ak
from coffea import processor


class Gated(processor.ProcessorABC):
    def __init__(self, until, gate=""):
        self.until = until
        self.gate = gate

    def process(self, events):
        if ak.backend(events) == "typetracer":  # coffea's trace of the columns read (over XRootD): none, hold nothing
            return {}
        if self.gate:  # say this file is held (it reads no column: nothing left to read): the test takes its site
            open(f"{self.gate}.{os.path.basename(events.metadata['filename'])}.held", "w").close()  # down after four
        while time.time() < self.until and not (self.gate and os.path.exists(self.gate)):
            time.sleep(0.2)
        return {"events": len(events), "files": {events.metadata["filename"]: len(events)}}

    def postprocess(self, accumulator):
        return accumulator
"""


def campaign(
    site: str, tag: str, env: dict, *options: str, name: str = "run", until: float = 0.0
) -> subprocess.CompletedProcess:
    """A campaign over results/TAG/fileset.json on profiles/SITE and site-configs/SITE.yaml (HTCondor-provisioned
    workers), one file a job, the gated analysis holding each file until UNTIL; the workers get no credential
    variable of their own (the default list would pass its path on): a task reads only with what TaskVine brings it."""
    inputs = REPO / "results" / tag
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "gated.py").write_text(GATED_ANALYSIS)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", f"profiles/{site}", "--config"]
        + [f"dataset=results/{tag}/fileset.json", f"site=site-configs/{site}.yaml", f"campaign={tag}-{name}"]
        + [f"analysis=results/{tag}/gated.py:Gated", f"analysis_args={{until: {until}}}", "files_per_job=1"]
        + ["credential_margin_h=0"]
        + ["--taskvine-worker-env", "PATH,LD_LIBRARY_PATH,HOME,USER,LANG,VIRTUAL_ENV,X509_CERT_DIR,CATALOG_*,XRD_*"]
        + list(options),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def report(tag: str, name: str) -> dict:
    return json.loads((REPO / "results" / f"{tag}-{name}" / "report.json").read_text())


def run_across_a_renewal(
    site: str, tag: str, env: dict, write, lifetime_s: float = 45, renew_before_s: float = 20
) -> tuple[subprocess.CompletedProcess, float]:
    """(a campaign() run, when its first credential expired): WRITE(seconds) writes the user's credential valid for
    that long; the first expires LIFETIME_S after the start and is renewed (for two hours) RENEW_BEFORE_S before that,
    while the first tasks are held until just after its end."""
    write(lifetime_s)
    expires = time.time() + lifetime_s
    renewal = threading.Timer(lifetime_s - renew_before_s, write, args=(7200,))
    renewal.start()
    try:
        return campaign(site, tag, env, until=expires + 1), expires
    finally:
        renewal.cancel()


def assert_read_after_the_end(result: dict, expires: float) -> None:
    """The tasks handed out after the first credential's end (all but the first worker cores' worth) read, with the
    renewed one: the expired one would have been refused."""
    after = [round(r["start"] - expires, 1) for r in result["inputs"]]
    assert sum(a > 1 for a in after) >= FILES - 4, after


def assert_nowhere(tag: str, run: subprocess.CompletedProcess, secrets: list[bytes]) -> None:
    """None of SECRETS is in a file the campaign wrote, in Snakemake's metadata, or in what the run printed."""
    for root in (REPO / "results" / f"{tag}-run", REPO / ".snakemake"):
        for path in root.rglob("*"):
            if path.is_file() and path.stat().st_size < 50_000_000:
                assert not any(secret in path.read_bytes() for secret in secrets), path
    assert not any(secret.decode() in run.stdout + run.stderr for secret in secrets)


@contextlib.contextmanager
def default_credentials_aside():
    """Move the user's credentials at the places XRootD's clients fall back to when no variable names one
    (/tmp/x509up_u<uid>, /tmp/bt_u<uid>, $XDG_RUNTIME_DIR/bt_u<uid>: a demo or the user may have left one there) aside
    for a test whose tasks must have none but what TaskVine brings them; put back after."""
    uid = os.getuid()
    places = [Path(f"/tmp/x509up_u{uid}"), Path(f"/tmp/bt_u{uid}")]
    if os.environ.get("XDG_RUNTIME_DIR"):
        places.append(Path(os.environ["XDG_RUNTIME_DIR"]) / f"bt_u{uid}")
    moved = [
        (place, place.rename(place.with_name(f"{place.name}.aside-{os.getpid()}")))
        for place in places
        if place.exists()
    ]
    try:
        yield
    finally:
        for place, aside in moved:
            aside.replace(place)


def grid_proxy(services: dict, out: Path, hours: int = 1) -> str:
    """A proxy of the sandbox test grid's user certificate with the test VO's attributes, made as a user makes one
    (voms-proxy-init -voms <VO>; voms-proxy-fake in the sandbox)."""
    return str(proxies.make(services["xrootd"]["origin_gsi"]["gsi"], out, hours=hours))
