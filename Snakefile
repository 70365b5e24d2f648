# hepvine: an analysis campaign over a dataset of ROOT files.
#   snakemake --cores 2 --config dataset=<fileset.json|spec.yaml> [analysis=<file.py>:<Processor>] [campaign=<name>]
#             [site=...] [recompress=zstd:5] [files_per_job=...] [chunksize=...] [merge_fan_in=...]
#   snakemake --profile profiles/sandbox --config dataset=...      # on TaskVine workers run by HTCondor
from snakemake.utils import min_version, validate

min_version("9.14.8")
validate(config, "workflows/schemas/config.schema.yaml")


include: "workflows/rules/common.smk"
include: "workflows/rules/campaign.smk"


if workflow.is_main_process:
    import os
    import sys

    from hepvine.products import provenance

    # Only this process knows the command line, the profile and the checkout: recorded for the report's provenance.
    provenance.write_run(
        f"{INDEX}/run.json",
        provenance.collect_run(
            config=config,
            argv=sys.argv,
            environ=dict(os.environ),
            workflow_dir=Path(workflow.basedir),
            configfiles=workflow.config_settings.configfiles,
            credential=CREDENTIAL.provenance() if CREDENTIAL else None,
            rucio=hv_replicas.record(RUCIO_DIR) if PLANNED != config["dataset"] else None,
        ),
        sys.argv,
    )


rule all:
    input:
        f"{OUT}/report.json",
        f"{OUT}/output.coffea",
        f"{OUT}/histograms.root",
        rules.report.output.plots,
        [f"{OUT}/dataset.{RECOMPRESS_CODEC}.json"] if RECOMPRESS else [],


onsuccess:
    from hepvine.products.summary import process_age_s, summary_line
    from hepvine.products.retries import update as update_retries

    if Path(f"{OUT}/report.json").exists():
        report = json.loads(Path(f"{OUT}/report.json").read_text())
        update_retries(report, Path(RETRIES_FILE))
        if report["complete"] and Path(f"{CACHE_STATS}/start.json").exists():
            Path(f"{CACHE_STATS}/start.json").unlink()
        print(summary_line(report, OUT, process_age_s()))


onerror:
    # The failures recorded by the jobs that finished are counted (from the report if the run made it, else from
    # their results), so that the same command again retries the transient ones as it would after a full run.
    from hepvine.products.retries import update_after_error

    try:
        n, unreadable = update_after_error(Path(OUT), Path(RUN_STARTED), Path(RETRIES_FILE))
    except OSError as e:
        print(
            f"hepvine: {RETRIES_FILE} not updated ({e}): the next run may not retry this run's failures",
            file=sys.stderr,
        )
    else:
        for why in unreadable:
            print(
                f"hepvine: a result of this run could not be read, its failures not counted: {why}", file=sys.stderr
            )
        if n:
            print(
                f"hepvine: {n} failure(s) recorded by the jobs that finished (counted in {RETRIES_FILE}); run the "
                "same command again, which retries the transient ones",
                file=sys.stderr,
            )
