#!/usr/bin/env bash
# Run one command in the sandbox as the analysis user with the services up, then stop the services whatever
# happened (also on Ctrl-C). Exits with the command's status. Used by `make test` and `make demo`.
#   with-services.sh COMMAND [ARG...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
services() { "$here/enter.sh" --root -- python3 "$here/services.py" "$1"; }
services start || exit 1
trap 'services stop' EXIT
trap 'exit 130' INT TERM
"$here/enter.sh" -- "$@"
