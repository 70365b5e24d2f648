# The campaign: resolve the spec, analyse each file in its own job, merge in a tree, write histograms and report.
# Every job parses the Snakefile, which reads the user's spec: it is an input of each rule, so that without a shared
# filesystem it is sent along with the job.

localrules: resolve_spec, recompressed_spec


rule resolve_spec:
    input:
        config["dataset"],
    output:
        spec=f"{OUT}/dataset.json",
    log:
        f"{OUT}/logs/resolve_spec.log",
    run:
        import json

        with open(output.spec, "w") as f:
            json.dump(SPEC, f, indent=2)


if RECOMPRESS:

    rule recompress:
        input:
            user_spec=config["dataset"],
        output:
            recompressed=f"{OUT}/recompressed/{{name}}.root",
        log:
            f"{OUT}/logs/recompress/{{name}}.log",
        params:
            source=lambda wildcards: TASKS[wildcards.name].path,
            codec=config["recompress"],
            retry=lambda wildcards: RETRIES.get(wildcards.name, 0),
        shell:
            "python -m hepvine.recompress {params.source:q} {output.recompressed} --codec {params.codec}"
            " --record-failure 2> {log}"

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
    inputs = {"spec": rules.resolve_spec.output.spec, "user_spec": config["dataset"]}
    if RECOMPRESS:
        inputs["recompressed"] = f"{OUT}/recompressed/{wildcards.name}.root"
    return inputs


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
        read_from=lambda wildcards, input: f"--read-from {input.recompressed}" if RECOMPRESS else "",
    shell:
        "python -m hepvine.per_file --spec {input.spec} --task {wildcards.name} --lumi-pb {params.lumi}"
        " {params.read_from} --output {output.result} 2> {log}"


rule merge:
    input:
        results=merge_inputs,
        user_spec=config["dataset"],
    output:
        f"{OUT}/merge/{{level}}/{{index}}.pkl",
    log:
        f"{OUT}/logs/merge/{{level}}-{{index}}.log",
    shell:
        "python -m hepvine.merge --output {output} {input.results} 2> {log}"


rule report:
    input:
        merged=MERGED,
        user_spec=config["dataset"],
    output:
        histograms=f"{OUT}/histograms.root",
        report=f"{OUT}/report.json",
        retries=RETRIES_FILE,
    log:
        f"{OUT}/logs/report.log",
    params:
        previous=json.dumps(RETRIES),
    shell:
        "python -m hepvine.report --merged {input.merged} --histograms {output.histograms}"
        " --report {output.report} --retries {output.retries} --previous-retries '{params.previous}' 2> {log}"


rule plots:
    input:
        merged=MERGED,
        user_spec=config["dataset"],
    output:
        [f"{OUT}/plots/{region}.png" for region in REGIONS],
        timeline=f"{OUT}/plots/timeline.png",
    log:
        f"{OUT}/logs/plots.log",
    shell:
        "python -m hepvine.plots --merged {input.merged} --outdir {OUT}/plots 2> {log}"
