# Shared definitions of the campaign's rules. Jobs (on workers) parse this file too, so everything that grows with
# the dataset — loading and validating the spec, routing every file, cutting it into batches, writing the per-batch
# index and the merge tree — happens only on the login node: in the main process, and in the subprocesses in which
# Snakemake runs the few local `run:` rules (which need the whole spec); a remote job reads its own index files.
import json
import os
import shlex
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake_interface_executor_plugins.settings import SharedFSUsage

from hepvine.model import dataset as hv_dataset
from hepvine.reading import credentials as hv_credentials
from hepvine.reading import fetch as hv_fetch
from hepvine.routing import index as hv_index
from hepvine.routing import replicas as hv_replicas
from hepvine.model import limits as hv_limits
from hepvine.model import sources as hv_sources
from hepvine.products import retries as hv_retries
from hepvine.routing import site as hv_site

OUT = f"results/{config['campaign']}"
INDEX = f"{OUT}/index"
# The merge tree's root: the results the report adds up (hepvine.routing.index.merge_tree).
ROOT_NODE = f"{INDEX}/merge/root.json"
HAS_SITE = bool(config["site"])
RECOMPRESS = config["recompress"] != "off"
RECOMPRESS_CODEC = config["recompress"].split(":")[0]
CACHE_STATS = f"{OUT}/cache-stats"
# Each file's transient failures so far (written when a run ends): a batch's sum is a parameter of its job, so a
# new run reruns exactly the batches that had a transient failure (Snakemake reruns jobs whose parameters changed).
RETRIES_FILE = f"{OUT}/retries.json"
# Touched by the main process as the run begins: its modification time is the run's start on the results'
# filesystem (what a run that ends in an error counts from: hepvine.products.retries.update_after_error).
RUN_STARTED = f"{INDEX}/run-started"
# The analysis (hepvine.work.processor loads it in the jobs; never imported here: every job parses this file). Its local
# files (the user's file, what it imports from beside it, a package in the working directory: hepvine.model.sources)
# are inputs of the jobs that run it: shipped to workers without a shared filesystem, and a change of one reruns them.
# Its arguments are a parameter (a change reruns them too).
ANALYSIS = config["analysis"]
ANALYSIS_WHERE = ANALYSIS.rpartition(":")[0]  # its file (<file.py>:<Name>) or module (<module>:<Name>)


def typed(value):
    """VALUE with its text leaves read as YAML scalars: Snakemake hands a mapping given on the command line
    (--config analysis_args="{pt_min: 25.0}") over with every value as text ('25.0')."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return yaml.safe_load(value) if isinstance(value, str) and value else value


def given_over(value, given):
    """VALUE (the config's, a config file's values as written there) with GIVEN (the same key's on the command
    line: --config, a profile's config) over it, GIVEN's text read as YAML scalars (``typed``), mappings merged as
    Snakemake merges them: a value quoted in a config file ("2018") stays text."""
    if isinstance(value, dict) and isinstance(given, dict):
        return {**value, **{k: given_over(value.get(k), v) for k, v in given.items()}}
    return typed(given)


ANALYSIS_ARGS_GIVEN = workflow.config_settings.config.get("analysis_args")
ANALYSIS_ARGS_VALUE = (
    config["analysis_args"] if ANALYSIS_ARGS_GIVEN is None else given_over(config["analysis_args"], ANALYSIS_ARGS_GIVEN)
)
ANALYSIS_ARGS = json.dumps(ANALYSIS_ARGS_VALUE, sort_keys=True, separators=(",", ":"))
# (Rules that use it have the parameter analysis_args = ANALYSIS_ARGS.)
# What the jobs that read its outputs (merges, the report) are told of it: they import its module, so that instances
# of the user's own classes in the outputs unpickle (its files are their inputs too).
ANALYSIS_MODULE = f"--analysis {shlex.quote(ANALYSIS)}"
ANALYSIS_OPTIONS = f"{ANALYSIS_MODULE} --analysis-args {{params.analysis_args:q}}"
# (A job's parse on a worker without a shared filesystem has the files only when it is a job that runs the analysis.)
if ANALYSIS_WHERE.endswith(".py") and not Path(ANALYSIS_WHERE).is_file() and not workflow.remote_exec:
    raise WorkflowError(
        f"analysis={ANALYSIS}: no such file {ANALYSIS_WHERE} (relative to {Path.cwd()}); give "
        "<file.py>:<Name> or <module>:<Name>"
    )
try:
    ANALYSIS_FILES = hv_sources.local_sources(ANALYSIS)
    if not workflow.remote_exec:  # said before any job, not job after job
        hv_sources.check_names(ANALYSIS, ANALYSIS_ARGS_VALUE)
        if SharedFSUsage.INPUT_OUTPUT not in workflow.storage_settings.shared_fs_usage:
            hv_sources.check_sendable(ANALYSIS, ANALYSIS_FILES, Path.cwd())
except hv_sources.SourcesError as e:
    raise WorkflowError(str(e)) from None
# A spec that names Rucio DIDs is planned from what they resolved to, kept here (hepvine.routing.replicas).
RUCIO_DIR = f"{OUT}/rucio"

LIMITS = hv_limits.Limits(config["rate_floor_mb_s"], config["file_time_base_s"], config["bytes_per_event"])


def planned_seconds(site, batches):
    """A first run's length as `hepvine plan` estimates it for SITE (hepvine.commands.plan.estimated_seconds) from
    the events of BATCHES' files where known (the spec's events, or its bytes over config bytes_per_event); None if
    none is."""
    from hepvine.commands import plan as hv_plan  # only here: a first run with a credential to check

    files = [
        (hv_site.lfn(f.path), f.nevts if f.nevts is not None else f.bytes / LIMITS.bytes_per_event)
        for batch in batches
        for f in batch.files
        if f.nevts is not None or f.bytes
    ]
    return hv_plan.estimated_seconds(site, files) if files else None


def checked_credential(site, batches):
    """The credential SITE asks for (site config key credentials), checked before the first job against the time the
    campaign is expected to need (the last run's time per file times the files not yet analysed; on a first run,
    hepvine plan's estimate, which only warns) plus config credential_margin_h: described in the run's first lines
    (never the secret), warnings shown; a WorkflowError naming the renewal command when it is missing, expired or
    too short."""
    files = sum(len(b.files) for b in batches)
    try:
        credential = hv_credentials.find(site.credentials)
        if credential is None:
            return None
        needed_s, planned = None, None
        if Path(f"{OUT}/report.json").exists():
            last = json.loads(Path(f"{OUT}/report.json").read_text())
            if last["files"]["total"]:
                needed_s = last["wall_seconds"] / last["files"]["total"] * max(0, files - last["files"]["ok"])
        else:
            planned = planned_seconds(site, batches)
        warnings = hv_credentials.check(credential, needed_s, config["credential_margin_h"] * 3600, planned=planned)
    except hv_credentials.CredentialError as e:
        raise WorkflowError(
            f"{e}\n(the site config {config['site']} says credentials: {site.credentials}; no job was run)"
        )
    print(f"hepvine: reading with {credential.describe()}", file=sys.stderr)
    # Where the executor finds it to send it with every task (the TaskVine plugin's --taskvine-credential-env) and
    # local jobs read it: the variable that names its file.
    os.environ[hv_credentials.VARIABLE[credential.kind]] = str(hv_credentials.as_file(credential))
    for warning in warnings:
        print(f"hepvine: WARNING: {warning}", file=sys.stderr)
    return credential


SPEC = SITE = CREDENTIAL = None
BATCHES, BATCH, BATCH_RETRY, BATCH_FIXED, LFNS = [], {}, {}, {}, []
# The files the main process reads to plan the campaign; inputs of the rules that re-read them. PLANNED: the spec it
# plans from (what the spec's Rucio DIDs resolved to, if it names some).
PARSED = [config["dataset"]] + ([config["site"]] if HAS_SITE else [])
PLANNED = config["dataset"]
if not workflow.remote_exec:
    try:
        SITE = hv_site.load(config["site"]) if HAS_SITE else None
    except hv_site.SiteError as e:
        raise WorkflowError(f"{e}\nFix the site config given as --config site=... and run again.")
    try:
        PLANNED, SPEC = hv_replicas.resolved(
            config["dataset"],
            hv_dataset.read(Path(config["dataset"])),
            RUCIO_DIR,
            SITE.replicas if SITE else None,
            refresh=config["rucio_refresh"],
            may_ask=workflow.is_main_process,
            vet=hv_credentials.vetted_proxy,
        )
        SPEC = hv_dataset.validated(SPEC, PLANNED)
    except hv_dataset.DatasetError as e:
        raise WorkflowError(f"{e}\nFix the spec given as --config dataset=... and run again.")
    except hv_replicas.ResolutionError as e:
        raise WorkflowError(
            f"{e}\n(resolving the Rucio DIDs that the spec given as --config dataset={config['dataset']} names; "
            "no job was run)"
        )
    if PLANNED != config["dataset"]:
        PARSED.append(PLANNED)

    def route_of(path, replicas=()):
        """A file's route: home cache, its rack, and where to fail over to (without a site: the path itself, then
        its replicas)."""
        return SITE.route(path, replicas).as_dict() if SITE else hv_fetch.local_route(path, replicas)

    BATCHES = hv_index.plan(hv_dataset.tasks(SPEC), config["files_per_job"], route_of)
    if workflow.is_main_process:
        CREDENTIAL = checked_credential(SITE, BATCHES) if SITE else None
        hv_index.write(INDEX, BATCHES, SITE.xrootd_client if SITE else {})
        Path(RUN_STARTED).touch()
        MERGE_NODES, MERGE_ROOT = hv_index.merge_tree(
            [f"{OUT}/files/{b.id}.pkl" for b in BATCHES], config["merge_fan_in"], f"{OUT}/merge"
        )
        hv_index.write_merge_tree(f"{INDEX}/merge", MERGE_NODES, MERGE_ROOT, f"{OUT}/merge")
        if SITE:  # what the report needs of the site (a job cannot expand the site config's ${VARIABLES})
            hv_index.write_site(INDEX, SITE.name, SITE.rack_cores())
    BATCH = {b.id: b for b in BATCHES}
    counts = hv_retries.transient_counts(Path(RETRIES_FILE))
    BATCH_RETRY = {b.id: n for b in BATCHES if (n := sum(counts.get(t.fid, 0) for t in b.files))}
    # Permanently failed files whose source was replaced or restored since: their batches run again (a stat of each
    # failed file, nothing for the others).
    fixed = hv_retries.fixed_sources(hv_retries.permanent_failures(Path(RETRIES_FILE)))
    for b in BATCHES if fixed else ():
        if changed := " ".join(f"{t.fid}={fixed[t.fid]}" for t in b.files if t.fid in fixed):
            BATCH_FIXED[b.id] = changed
    if SITE:
        LFNS = sorted({hv_site.lfn(t.path) for b in BATCHES for t in b.files})


def home_rack(wildcards):
    """The rack a batch's job prefers (TaskVine executor: the job resource taskvine_prefer); empty for none."""
    batch = BATCH.get(wildcards.batch)
    return (batch.rack or "") if batch else ""


def _sizes(batch):
    return [(t.nevts, t.bytes) for t in BATCH[batch].files]


def batch_runtime_min(wildcards):
    """A batch's time limit in minutes (resource runtime; hepvine.model.limits): with columns: auto, room for one
    file run twice. A job's own process, which has no batches, never needs it."""
    if wildcards.batch not in BATCH:
        return 0
    return LIMITS.job_runtime_min(_sizes(wildcards.batch), rerun=config["columns"] == "auto")


def batch_recompress_disk_mb(wildcards):
    """The disk (MB) a recompressing batch needs on its worker (resource disk_mb; hepvine.model.limits): with a shared
    filesystem its copies go there, not to the worker's disk."""
    copies_on_worker = SharedFSUsage.INPUT_OUTPUT not in workflow.storage_settings.shared_fs_usage
    return LIMITS.recompress_disk_mb(_sizes(wildcards.batch), copies_on_worker) if wildcards.batch in BATCH else 0


def write_cache_stats(path):
    """The caches' counters at the run's start (start.json, written by onstart) and now, to PATH."""
    from hepvine.model import atomic
    from hepvine.products import cachestats

    start = json.loads(Path(f"{CACHE_STATS}/start.json").read_text())
    atomic.write_json(path, {"start": start, "end": cachestats.snapshot(SITE, LFNS)})


def write_resolved_spec(path):
    """The dataset with each file's route (computed once, when planning), to PATH."""
    from hepvine.model import atomic

    routes = {t.fid: r for b in BATCHES for t, r in zip(b.files, b.routes)}
    atomic.write_json(path, hv_dataset.updated(SPEC, lambda task, entry: {"route": routes[task.fid]}), indent=None)


def write_recompressed_spec(path):
    """The dataset of the recompressed copies (each file's copy by its absolute path, so that a later campaign's
    workers find it wherever they see this directory; its original as ``source``), to PATH. A file whose copy
    failed keeps its original path (its record says why), so the dataset stays usable."""
    from hepvine.model import atomic

    copies = {}
    for b in BATCHES:
        directory = os.path.abspath(f"{OUT}/recompressed/{b.id}")
        manifest = json.loads(Path(f"{directory}/manifest.json").read_text())
        copies.update({fid: f"{directory}/{name}" for fid, name in manifest["copies"].items()})
    moved = hv_dataset.updated(
        SPEC, lambda task, entry: {"source": entry["path"], "path": copies[task.fid]} if task.fid in copies else {}
    )
    atomic.write_json(path, moved, indent=None)


def all_copies(wildcards):
    """Every batch's directory of recompressed copies (the inputs of the recompressed dataset)."""
    return [f"{OUT}/recompressed/{b.id}" for b in BATCHES]


def node_inputs(node):
    """A merge node's inputs, listed in its own index file NODE (an input too, so it is shipped to the job)."""
    return {"node": node, "results": json.loads(Path(node).read_text())}


def report_inputs(wildcards):
    """The report's inputs: the results the merge tree's root adds up and the expected files, and with a site its
    caches' counters."""
    inputs = {**node_inputs(ROOT_NODE), "expected": f"{INDEX}/expected.json"}
    if HAS_SITE:
        inputs["cache_stats"] = rules.cache_stats.output[0]
        inputs["site"] = f"{INDEX}/site.json"
    return inputs
