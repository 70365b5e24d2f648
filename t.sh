timeout -s INT 900 python -m pytest -x -q -p no:cacheprovider tests/plugin -k "lost" 2>&1 > /tmp/pt.log; grep -nE "^E  |passed|failed" /tmp/pt.log | head -40
ps -eo pid,args | grep -E 'vine_' | grep -v grep
