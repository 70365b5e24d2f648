#!/usr/bin/env bash
# Run one command in the sandbox as the analysis user with the services up, then stop the services whatever
# happened (also on Ctrl-C). Exits with the command's status. Used by `make test` and `make demo`.
#   with-services.sh COMMAND [ARG...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stop_services() { "$here/enter.sh" --root --no-build -- python3 "$here/services.py" stop; }
"$here/enter.sh" --root -- python3 "$here/services.py" start || exit 1
trap stop_services EXIT
trap 'exit 130' INT TERM
"$here/enter.sh" -- "$@"
