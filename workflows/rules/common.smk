# Shared definitions of the campaign's rules. Jobs (on workers) parse this file too, so everything that grows with
# the dataset — loading and validating the spec, routing every file, cutting it into batches, writing the per-batch
# index and the merge tree — happens only on the login node: in the main process, and in the subprocesses in which
# Snakemake runs the few local `run:` rules (which need the whole spec); a remote job reads its own index files.
import json
import shlex
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake_interface_executor_plugins.settings import SharedFSUsage

from hepvine import dataset as hv_dataset
from hepvine import fetch as hv_fetch
from hepvine import index as hv_index
from hepvine import limits as hv_limits
from hepvine import retries as hv_retries
from hepvine import site as hv_site

OUT = f"results/{config['campaign']}"
INDEX = f"{OUT}/index"
MERGED = f"{OUT}/merged.pkl"
HAS_SITE = bool(config["site"])
RECOMPRESS = config["recompress"] != "off"
RECOMPRESS_CODEC = config["recompress"].split(":")[0]
CACHE_STATS = f"{OUT}/cache-stats"
# Each file's transient failures so far (written when a run ends): a batch's sum is a parameter of its job, so a
# new run reruns exactly the batches that had a transient failure (Snakemake reruns jobs whose parameters changed).
RETRIES_FILE = f"{OUT}/retries.json"
# The analysis's regions (hepvine.analysis.REGIONS, not imported: every job parses this file, and importing the
# analysis costs awkward and hist; a test checks the two agree). One plot each.
REGIONS = ("4j1b", "4j2b")
# The files the main process reads to plan the campaign; inputs of the rules that re-read them.
PARSED = [config["dataset"]] + ([config["site"]] if HAS_SITE else [])

LIMITS = hv_limits.Limits(config["rate_floor_mb_s"], config["file_time_base_s"], config["bytes_per_event"])

SPEC = SITE = None
BATCHES, BATCH, BATCH_RETRY, LFNS = [], {}, {}, []
if not workflow.remote_exec:
    try:
        SPEC = hv_dataset.load(config["dataset"])
    except hv_dataset.DatasetError as e:
        raise WorkflowError(f"{e}\nFix the spec given as --config dataset=... and run again.")
    try:
        SITE = hv_site.load(config["site"]) if HAS_SITE else None
    except hv_site.SiteError as e:
        raise WorkflowError(f"{e}\nFix the site config given as --config site=... and run again.")

    def route_of(path):
        """A file's route: home cache, its rack, and where to fail over to (without a site: the path itself)."""
        return SITE.route(path).as_dict() if SITE else hv_fetch.local_route(path)

    BATCHES = hv_index.plan(hv_dataset.tasks(SPEC), config["files_per_job"], route_of)
    if workflow.is_main_process:
        hv_index.write(INDEX, BATCHES, SITE.xrootd_client if SITE else {})
        MERGE_NODES, MERGE_ROOT = hv_index.merge_tree([f"{OUT}/files/{b.id}.pkl" for b in BATCHES],
                                                      config["merge_fan_in"], f"{OUT}/merge")
        hv_index.write_merge_tree(f"{INDEX}/merge", MERGE_NODES, MERGE_ROOT, f"{OUT}/merge")
        if SITE:  # what the report needs of the site (a job cannot expand the site config's ${VARIABLES})
            hv_index.write_site(INDEX, SITE.name, SITE.rack_cores())
    BATCH = {b.id: b for b in BATCHES}
    counts = hv_retries.transient_counts(Path(RETRIES_FILE))
    BATCH_RETRY = {b.id: n for b in BATCHES if (n := sum(counts.get(t.fid, 0) for t in b.files))}
    if SITE:
        LFNS = sorted({m.group(2) if (m := hv_site.ROOT_URL.match(t.path)) else t.path
                       for b in BATCHES for t in b.files})


def home_rack(wildcards):
    """The rack a batch's job prefers (TaskVine executor: the job resource taskvine_prefer); empty for none."""
    batch = BATCH.get(wildcards.batch)
    return (batch.rack or "") if batch else ""


def _sizes(batch):
    return [(t.nevts, t.bytes) for t in BATCH[batch].files]


def batch_runtime_min(wildcards):
    """A batch's time limit in minutes (resource runtime; hepvine.limits). A job's own process, which has no
    batches, never needs it."""
    return LIMITS.job_runtime_min(_sizes(wildcards.batch)) if wildcards.batch in BATCH else 0


def batch_recompress_disk_mb(wildcards):
    """The disk (MB) a recompressing batch needs on its worker (resource disk_mb; hepvine.limits): with a shared
    filesystem its copies go there, not to the worker's disk."""
    copies_on_worker = SharedFSUsage.INPUT_OUTPUT not in workflow.storage_settings.shared_fs_usage
    return LIMITS.recompress_disk_mb(_sizes(wildcards.batch), copies_on_worker) if wildcards.batch in BATCH else 0


def spec_with(spec, fields):
    """A copy of SPEC in which each file's entry is updated with FIELDS(task, entry) (a dict; empty: unchanged)."""
    changed = json.loads(json.dumps(spec))
    for task in hv_dataset.tasks(spec):
        entry = changed[task.process][task.variation]["files"][task.index]
        entry.update(fields(task, entry) or {})
    return changed
