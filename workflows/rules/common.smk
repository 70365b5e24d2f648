# Shared definitions of the campaign's rules: the validated dataset, its per-file tasks, and the merge tree.
import json
import math
import shlex
from pathlib import Path

from snakemake.exceptions import WorkflowError

from hepvine import dataset as hv_dataset
from hepvine import fetch as hv_fetch
from hepvine import site as hv_site

OUT = f"results/{config['campaign']}"
try:
    SPEC = hv_dataset.load(config["dataset"])
except hv_dataset.DatasetError as e:
    raise WorkflowError(f"{e}\nFix the spec given as --config dataset=... and run again.")
TASKS = {t.name: t for t in hv_dataset.tasks(SPEC)}
try:
    SITE = hv_site.load(config["site"]) if config["site"] else None
except hv_site.SiteError as e:
    raise WorkflowError(f"{e}\nFix the site config given as --config site=... and run again.")
# Each file's route: home cache, its rack, and where to fail over to (without a site: the path, read where it is).
ROUTES = {name: (SITE.route(t.path).as_dict() if SITE else hv_fetch.local_route(t.path)) for name, t in TASKS.items()}
# Every job parses this workflow, which reads these files: each rule lists them as inputs, so that without a shared
# filesystem they are sent along with the job.
PARSED = [config["dataset"]] + ([config["site"]] if SITE else [])
XRD_ENV = SITE.client_env() if SITE else ""
CACHE_STATS = f"{OUT}/cache-stats"
LFNS = sorted({route["lfn"] for route in ROUTES.values()})


def home_rack(wildcards):
    """The rack a file's task prefers (TaskVine executor: the job resource taskvine_prefer); empty for none."""
    return ROUTES[wildcards.name]["rack"] or ""


def route_json(wildcards):
    return json.dumps(ROUTES[wildcards.name], separators=(",", ":"))
FAN_IN = config["merge_fan_in"]
# The analysis's regions (hepvine.analysis.REGIONS, not imported: every job parses this file, and importing the
# analysis costs awkward and hist; a test checks the two agree). One plot each.
REGIONS = ("4j1b", "4j2b")


def tree_levels(n_leaves, fan_in):
    """Nodes per merge level: level 1 merges leaves in groups of FAN_IN, and so on up to a single node."""
    levels = [math.ceil(n_leaves / fan_in)]
    while levels[-1] > 1:
        levels.append(math.ceil(levels[-1] / fan_in))
    return levels


LEVELS = tree_levels(len(TASKS), FAN_IN)
LEAVES = [f"{OUT}/files/{name}.pkl" for name in sorted(TASKS)]


def merge_inputs(wildcards):
    level, index = int(wildcards.level), int(wildcards.index)
    below = LEAVES if level == 1 else [f"{OUT}/merge/{level - 1}/{i}.pkl" for i in range(LEVELS[level - 2])]
    return below[index * FAN_IN:(index + 1) * FAN_IN]


MERGED = f"{OUT}/merge/{len(LEVELS)}/0.pkl"

# Files that failed in an earlier run, with how often: a file's counter is a parameter of its analysis job, so a new
# run retries exactly those (Snakemake reruns a job whose parameters changed). Written by the report rule.
RETRIES_FILE = f"{OUT}/retries.json"
RETRIES = json.loads(Path(RETRIES_FILE).read_text()) if Path(RETRIES_FILE).exists() else {}

RECOMPRESS = config["recompress"] != "off"
RECOMPRESS_CODEC = config["recompress"].split(":")[0]


def spec_with(spec, tasks, fields):
    """A copy of SPEC in which each task's file entry is updated with FIELDS(task, entry) (a dict)."""
    changed = json.loads(json.dumps(spec))
    for task in tasks.values():
        entry = changed[task.process][task.variation]["files"][task.index]
        entry.update(fields(task, entry))
    return changed


def routed_spec(spec, tasks, routes):
    """SPEC with each file's route (home cache, rack, URL, fail-overs) recorded next to its path."""
    return spec_with(spec, tasks, lambda task, entry: {"route": routes[task.name]})


def copied_spec(spec, tasks, out):
    """SPEC with each file's path replaced by its recompressed copy, and the original kept as ``source``."""
    return spec_with(spec, tasks, lambda task, entry: {"source": entry["path"],
                                                       "path": f"{out}/recompressed/{task.name}.root"})
