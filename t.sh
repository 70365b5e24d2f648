rm -rf /tmp/wf && cp -r /opt/hepvine-venv/lib/python3.13/site-packages/snakemake/common/tests/testcases/simple /tmp/wf && cd /tmp/wf
timeout -s INT 60 snakemake --verbose --executor taskvine --jobs 3 --taskvine-max-workers 2 --taskvine-worker-cores 2 --taskvine-worker-memory-mb 1500 --taskvine-worker-disk-mb 2000 > /tmp/wf.log 2>&1
echo "exit $?"
tail -40 /tmp/wf.log
