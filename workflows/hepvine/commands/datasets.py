"""``hepvine datasets QUERY``: what Rucio lists for QUERY (``<scope>:<name pattern>``, ``*`` a wildcard), each DID with
its files, size, events and the storage elements that hold them (and how many of its files each holds), as coffea's
dataset discovery shows them. ``--write FILE`` writes a coffea fileset that names them
(``{"<name>": {"rucio": "<did>"}}``: a campaign over it resolves them once and keeps what they resolved to);
with ``--files`` it lists their files instead, each at its preferred replica (a plain fileset, which coffea's own
Runner reads too; it keeps no other replica to fail over to). ``--site`` takes the replica preferences of a site
config (its ``replicas`` key)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hepvine.model import atomic
from hepvine.reading import credentials
from hepvine.routing import replicas, site


def table(rows: list[dict]) -> str:
    """ROWS (each a DID and its ``replicas.summary``) as the text table the command prints."""
    lines = [f"{'files':>7} {'GB':>9} {'events':>13}  {'DID':<60} storage elements (files held)"]
    for r in rows:
        events = f"{r['events']:,}" if r["events"] is not None else "?"
        where = ", ".join(f"{rse} ({n})" for rse, n in r["rses"].items())
        lines.append(f"{r['files']:>7} {r['bytes'] / 1e9:>9.3f} {events:>13}  {r['did']:<60} {where}")
    return "\n".join(lines)


def fileset(found: dict[str, list[dict]], with_files: bool) -> dict:
    """The fileset of FOUND ({did: files}): each DID by name, or (WITH_FILES) its files at their first replica."""
    out = {}
    for did, files in found.items():
        name = did.split(":", 1)[1]
        if with_files:
            out[name] = {"files": {f["path"]: "Events" for f in files}, "metadata": {"rucio": did}}
        else:
            out[name] = {replicas.KEY: did}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine datasets", description=__doc__.split("\n\n")[0])
    parser.add_argument("query", help="<scope>:<name pattern>, e.g. 'cms:/TTto*/Run3Summer22NanoAODv12*/NANOAODSIM'")
    parser.add_argument(
        "--type",
        choices=("container", "dataset", "collection"),
        default="container",
        help="what to list: containers (CMS datasets), Rucio datasets (blocks), or both (default: container)",
    )
    parser.add_argument("--site", help="a site config whose `replicas` preferences order and filter the replicas")
    parser.add_argument("--write", metavar="FILE", help="write a coffea fileset of what was found to FILE (JSON)")
    parser.add_argument(
        "--files",
        action="store_true",
        help="with --write: list the files at their preferred replicas, not the DIDs (a fileset for coffea itself: "
        "it keeps no other replica to fail over to)",
    )
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args(argv)
    if args.files and not args.write:
        parser.error("--files says what --write writes: give --write FILE too")
    try:
        preferences = site.load(args.site).replicas if args.site else {}
        scope, pattern = replicas.split_did(args.query)
        client = replicas.client(credentials.vetted_proxy)
        try:
            names = sorted(client.list_dids(scope, {"name": pattern}, did_type=args.type))
        except Exception as e:  # Rucio's own types (ScopeNotFound, ...)
            raise replicas.ResolutionError(f"{args.query}: Rucio says {type(e).__name__}: {e}") from e
        found = {f"{scope}:{name}": replicas.files_of(client, f"{scope}:{name}", preferences) for name in names}
    except (replicas.ResolutionError, site.SiteError) as e:
        print(f"hepvine datasets: {e}", file=sys.stderr)
        return 2
    rows = [{"did": did, **replicas.summary(files)} for did, files in found.items()]
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    if not rows:
        print(f"hepvine datasets: Rucio lists no {args.type} matching {args.query}", file=sys.stderr)
        return 1
    if args.write:
        atomic.write_json(Path(args.write), fileset(found, args.files), indent=1)
        print(f"hepvine datasets: wrote {args.write} ({len(rows)} datasets)", file=sys.stderr)
    return 0
