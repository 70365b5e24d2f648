"""Where the running services are: the one file (``$HEPVINE_SERVICES``, written by the sandbox's services.py) that
lists every port and directory, read here and nowhere else in the workflow."""

from __future__ import annotations

import json
import os
from pathlib import Path


class ServicesNotRunning(RuntimeError):
    pass


def load(path: str | os.PathLike | None = None) -> dict:
    """The services file as a dict; PATH defaults to $HEPVINE_SERVICES."""
    path = path or os.environ.get("HEPVINE_SERVICES")
    if not path or not Path(path).is_file():
        raise ServicesNotRunning(
            f"no services file at {path!r} ($HEPVINE_SERVICES): start the sandbox's services with "
            "`make services-start`, or run inside `make shell` / `make run CMD=...`"
        )
    return json.loads(Path(path).read_text())
