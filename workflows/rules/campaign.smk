# The campaign: resolve the spec (with each file's route), analyse each file in its own job (in its home cache's rack),
# merge in a tree, write histograms and report. Every rule has the files the workflow parses (PARSED) as inputs.

localrules: resolve_spec, recompressed_spec, cache_stats


if SITE:

    onstart:
        from hepvine import cachestats

        Path(CACHE_STATS).mkdir(parents=True, exist_ok=True)
        Path(f"{CACHE_STATS}/start.json").write_text(json.dumps(cachestats.snapshot(SITE, LFNS), indent=2))

    rule cache_stats:
        input:
            MERGED,
            parsed=PARSED,
        output:
            f"{CACHE_STATS}/run.json",
        run:
            from hepvine import cachestats

            # start.json is written when this run starts (onstart), so it is not an input: this rule runs locally.
            start = json.loads(Path(f"{CACHE_STATS}/start.json").read_text())
            end = cachestats.snapshot(SITE, LFNS)
            Path(output[0]).write_text(json.dumps({"start": start, "end": end}, indent=2))


rule resolve_spec:
    input:
        PARSED,
    output:
        spec=f"{OUT}/dataset.json",
    log:
        f"{OUT}/logs/resolve_spec.log",
    run:
        with open(output.spec, "w") as f:
            json.dump(routed_spec(SPEC, TASKS, ROUTES), f, indent=2)


if RECOMPRESS:

    rule recompress:
        input:
            parsed=PARSED,
        output:
            recompressed=f"{OUT}/recompressed/{{name}}.root",
            fetched=f"{OUT}/recompressed/{{name}}.fetched.json",
        log:
            f"{OUT}/logs/recompress/{{name}}.log",
        params:
            source=lambda wildcards: TASKS[wildcards.name].path,
            route=route_json,
            codec=config["recompress"],
            retry=lambda wildcards: RETRIES.get(wildcards.name, 0),
        resources:
            taskvine_prefer=home_rack,
        shell:
            "{XRD_ENV} python -m hepvine.recompress {params.source:q} {output.recompressed} --codec {params.codec}"
            " --route {params.route:q} --fetched {output.fetched} --record-failure 2> {log}"

    rule recompressed_spec:
        input:
            copies=[f"{OUT}/recompressed/{name}.root" for name in sorted(TASKS)],
        output:
            spec=f"{OUT}/dataset.{RECOMPRESS_CODEC}.json",
        log:
            f"{OUT}/logs/recompressed_spec.log",
        run:
            with open(output.spec, "w") as f:
                json.dump(copied_spec(SPEC, TASKS, OUT), f, indent=2)


def analyse_inputs(wildcards):
    inputs = {"spec": rules.resolve_spec.output.spec, "parsed": PARSED}
    if RECOMPRESS:
        inputs["recompressed"] = f"{OUT}/recompressed/{wildcards.name}.root"
        inputs["fetched"] = f"{OUT}/recompressed/{wildcards.name}.fetched.json"
    return inputs


def read_how(wildcards, input):
    """The analysis reads the recompressed copy (and keeps how the original was fetched), or the file's route."""
    if RECOMPRESS:
        return f"--copy {input.recompressed} --fetched {input.fetched}"
    return f"--route {shlex.quote(route_json(wildcards))}"


rule analyse:
    input:
        unpack(analyse_inputs),
    output:
        result=f"{OUT}/files/{{name}}.pkl",
    log:
        f"{OUT}/logs/analyse/{{name}}.log",
    params:
        lumi=config["lumi_pb"],
        retry=lambda wildcards: RETRIES.get(wildcards.name, 0),
        read=read_how,
    resources:
        # Also when reading a recompressed copy: it is on the worker that made it, in the home rack unless the
        # recompression spilled. (Without the preference TaskVine sends the task to whichever worker is free first,
        # which in the demo was the copy's worker for only 12 of 24 files.)
        taskvine_prefer=home_rack,
    shell:
        "{XRD_ENV} python -m hepvine.per_file --spec {input.spec} --task {wildcards.name} --lumi-pb {params.lumi}"
        " {params.read} --output {output.result} 2> {log}"


rule merge:
    input:
        results=merge_inputs,
        parsed=PARSED,
    output:
        f"{OUT}/merge/{{level}}/{{index}}.pkl",
    log:
        f"{OUT}/logs/merge/{{level}}-{{index}}.log",
    shell:
        "python -m hepvine.merge --output {output} {input.results} 2> {log}"


def report_inputs(wildcards):
    inputs = {"merged": MERGED, "parsed": PARSED}
    if SITE:
        inputs["cache_stats"] = rules.cache_stats.output[0]
    return inputs


def cache_options(wildcards, input):
    if not SITE:
        return ""
    return f"--site {config['site']} --cache-stats {input.cache_stats}"


rule report:
    input:
        unpack(report_inputs),
    output:
        histograms=f"{OUT}/histograms.root",
        report=f"{OUT}/report.json",
        retries=RETRIES_FILE,
    log:
        f"{OUT}/logs/report.log",
    params:
        previous=json.dumps(RETRIES),
        cache=cache_options,
    shell:
        "python -m hepvine.report --merged {input.merged} --histograms {output.histograms}"
        " --report {output.report} --retries {output.retries} --previous-retries '{params.previous}'"
        " {params.cache} 2> {log}"


rule plots:
    input:
        merged=MERGED,
        parsed=PARSED,
    output:
        [f"{OUT}/plots/{region}.png" for region in REGIONS],
        timeline=f"{OUT}/plots/timeline.png",
    log:
        f"{OUT}/logs/plots.log",
    shell:
        "python -m hepvine.plots --merged {input.merged} --outdir {OUT}/plots 2> {log}"
