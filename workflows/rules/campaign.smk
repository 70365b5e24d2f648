# The campaign: one job per batch of files (read over each file's route, recompressed first if asked, analysed), a
# merge tree, histograms, report and plots. A job's inputs are its own index files; nothing it reads grows with N.


localrules:
    resolve_spec,


wildcard_constraints:
    batch=hv_index.BATCH_PATTERN,
    level=r"\d+",
    index=r"\d\d\d+/\d\d\d",  # <thousands>/<n>, as hepvine.routing.index.merge_tree names its nodes


if HAS_SITE:

    localrules:
        cache_stats,

    onstart:
        from hepvine.model import atomic
        from hepvine.products import cachestats

        # The first run's baseline is kept until a run completes: a resumed run measures from where it began.
        if not Path(f"{CACHE_STATS}/start.json").exists():
            atomic.write_json(f"{CACHE_STATS}/start.json", cachestats.snapshot(SITE, LFNS))

    rule cache_stats:
        input:
            # The results the merge tree's root adds up: made when every file's job has ended.
            unpack(lambda wildcards: node_inputs(ROOT_NODE)),
            parsed=PARSED,
        output:
            f"{CACHE_STATS}/run.json",
        run:
            # start.json is written when the campaign's run starts (onstart), so it is not an input: this rule runs
            # locally.
            write_cache_stats(output[0])


# A small campaign's last step on the login node (config host_steps_max_files): a worker job's start (TaskVine's
# dispatch, the job's parse of this workflow, sending outputs back) costs seconds, more than the report does.
# Only the main process knows the campaign's size; a job's own parse has no batches and needs no such decision.
HOST_STEPS = bool(BATCHES) and sum(len(b.files) for b in BATCHES) <= config["host_steps_max_files"]
if HOST_STEPS:

    localrules:
        report,


rule resolve_spec:
    input:
        PARSED,
    output:
        spec=f"{OUT}/dataset.json",
    log:
        f"{OUT}/logs/resolve_spec.log",
    run:
        write_resolved_spec(output.spec)


# A batch's result, and with recompression the directory of its copies. (Parameters are plain strings where they
# can be: Snakemake inspects a function's signature for every job, ~0.1 ms each, 58,000 jobs at 219,000 files.)
ANALYSE_OUTPUTS = {"result": f"{OUT}/files/{{batch}}.pkl"}
ANALYSE_OPTIONS = (
    f"--schema {config['schema']} --chunksize {config['chunksize']} --columns {config['columns']}"
    f" --read-attempts {config['read_attempts']} --read-backoff-s {config['read_backoff_s']}"
    f" --rate-floor-mb-s {LIMITS.rate_floor_mb_s} --file-time-base-s {LIMITS.file_time_base_s}"
    f" --bytes-per-event {LIMITS.bytes_per_event}"
)
# Its time limit (the executor's, the last guard: each file has its own inside the job) and, with recompression, its
# disk, from its files' sizes (hepvine.model.limits).
ANALYSE_RESOURCES = {"runtime": batch_runtime_min}
if RECOMPRESS:
    ANALYSE_OUTPUTS["copies"] = directory(f"{OUT}/recompressed/{{batch}}")
    ANALYSE_OPTIONS += f" --recompress {shlex.quote(config['recompress'])} --copies {{output.copies:q}}"
    ANALYSE_RESOURCES["disk_mb"] = batch_recompress_disk_mb


rule analyse:
    input:
        shard=f"{INDEX}/{{batch}}.json",
        analysis=ANALYSIS_FILES,
    output:
        **ANALYSE_OUTPUTS,
    log:
        f"{OUT}/logs/analyse/{{batch}}.log",
    resources:
        **ANALYSE_RESOURCES,
        taskvine_prefer=home_rack,
    params:
        analysis_args=ANALYSIS_ARGS,
        # The batch's transient failures so far: a new count reruns the job (see hepvine.products.retries).
        retry=lambda wildcards: BATCH_RETRY.get(wildcards.batch, 0),
        # Its permanently failed files whose source changed since (replaced, restored): a new value reruns it.
        fixed=lambda wildcards: BATCH_FIXED.get(wildcards.batch, ""),
    # With --taskvine-library the plugin sets TASKVINE_WARM_PYTHON: the driver is then forked from the library's
    # process, which has imported coffea once (--taskvine-library-preload in the profiles), instead of a new
    # interpreter that imports it again (0.7 s a job); anywhere else `python -m`. (The merge and the report too; on the
    # login node, from the plugin's server there: --taskvine-local-preload.)
    shell:
        "${{TASKVINE_WARM_PYTHON:-python -m}} hepvine.jobs.driver --shard {input.shard:q} "
        + ANALYSIS_OPTIONS
        + " "
        + ANALYSE_OPTIONS
        + " --output {output.result:q} 2> {log:q}"


if RECOMPRESS:

    localrules:
        recompressed_spec,

    rule recompressed_spec:
        input:
            all_copies,
        output:
            spec=f"{OUT}/dataset.{RECOMPRESS_CODEC}.json",
        log:
            f"{OUT}/logs/recompressed_spec.log",
        run:
            write_recompressed_spec(output.spec)


rule merge:
    input:
        unpack(lambda wildcards: node_inputs(f"{INDEX}/merge/{wildcards.level}/{wildcards.index}.json")),
        # Outputs may hold instances of the analysis's own classes: its module is imported before they are read.
        analysis=ANALYSIS_FILES,
    output:
        f"{OUT}/merge/{{level}}/{{index}}.pkl",
    log:
        f"{OUT}/logs/merge/{{level}}/{{index}}.log",
    shell:
        "${{TASKVINE_WARM_PYTHON:-python -m}} hepvine.jobs.merge "
        + ANALYSIS_MODULE
        + " --output {output:q} {input.results:q} 2> {log:q}"


rule report:
    input:
        unpack(report_inputs),
        # What the main process recorded of this run (hepvine.products.provenance; written by the Snakefile): an input,
        # so it reaches a report job on a worker, and a changed command line, profile, config or checkout remakes the
        # report.
        run=f"{INDEX}/run.json",
        # Its module is imported before the results are read; its postprocess runs here, once, on their sum.
        analysis=ANALYSIS_FILES,
    output:
        # What coffea's processor.Runner returns for the same analysis and dataset (coffea.util.load reads it).
        output=f"{OUT}/output.coffea",
        histograms=f"{OUT}/histograms.root",
        report=f"{OUT}/report.json",
        # The same outcome for `snakemake --report report.html` (captions in workflows/report/).
        summary=report(f"{OUT}/summary.html", category="Campaign", caption="../report/summary.rst"),
        failures=report(f"{OUT}/failures.tsv", category="Campaign", caption="../report/failures.rst"),
        # Drawn by the same job while it writes the rest (one program less to start and to load the output).
        plots=report(
            directory(f"{OUT}/plots"), patterns=["{name}.png"], category="Plots", caption="../report/plots.rst"
        ),
    log:
        f"{OUT}/logs/report.log",
    # On the login node its plots are drawn by two processes (Snakemake gives fewer if --cores is less); a worker's
    # job takes one core, as every other job does.
    threads: 2 if HOST_STEPS else 1
    params:
        analysis_args=ANALYSIS_ARGS,
        cache=lambda wildcards, input: (
            f"--site {shlex.quote(input.site)} --cache-stats {shlex.quote(input.cache_stats)}" if HAS_SITE else ""
        ),
        histograms="--plot-histograms" if config["plots"] else "",
    shell:
        "${{TASKVINE_WARM_PYTHON:-python -m}} hepvine.products.report --results {input.results:q}"
        " --expected {input.expected:q} --run {input.run:q} "
        + ANALYSIS_OPTIONS
        + " --output {output.output:q} --histograms {output.histograms:q} --report {output.report:q}"
        " --summary {output.summary:q} --failures {output.failures:q} {params.cache} --plots {output.plots:q}"
        " {params.histograms}"
        " --processes {threads} 2> {log:q}"
