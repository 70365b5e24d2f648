"""X.509 proxies with VOMS attributes of the sandbox's own test VO, for the sandbox's services, tests and the demo:
what a user at a site gets with ``voms-proxy-init -voms <VO>`` from the VO's VOMS server, made here with
``voms-proxy-fake`` (Debian's voms-clients), which signs the attribute certificate with the sandbox's VOMS
certificate (``services.json``: ``xrootd.origin_gsi.gsi``: ``vomscert``, ``vomskey``; the GSI servers trust it
through ``vomsdir``) instead of asking a server.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def make(gsi: dict, out: Path, hours: int = 12, vo: str | None = None, cert: str = "", key: str = "") -> Path:
    """A proxy of CERT and KEY (default: the test grid's user certificate) into OUT, mode 0600, valid for HOURS
    (its VOMS attributes as long), with the attributes of VO (default: the sandbox's test VO,
    ``gsi["vo"]``): FQAN ``/<VO>/Role=NULL/Capability=NULL``. Raises with the tool's words when it fails."""
    vo = vo or gsi["vo"]
    command = ["voms-proxy-fake", "-cert", cert or gsi["usercert"], "-key", key or gsi["userkey"]]
    command += ["-hostcert", gsi["vomscert"], "-hostkey", gsi["vomskey"], "-certdir", gsi["certdir"]]
    command += ["-voms", vo, "-fqan", f"/{vo}/Role=NULL/Capability=NULL", "-uri", f"{gsi['voms_host']}:15000"]
    command += ["-hours", str(hours), "-vomslife", str(hours), "-out", str(out)]
    made = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if made.returncode != 0 or not out.exists():
        raise RuntimeError(f"voms-proxy-fake could not make a proxy in {out}: {(made.stdout + made.stderr)[-2000:]}")
    os.chmod(out, 0o600)
    return out
