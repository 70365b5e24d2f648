#!/usr/bin/env bash
# Run one command in the sandbox as the analysis user with the services up, then stop the services whatever
# happened (also on Ctrl-C). Exits with the command's status. Used by every make target that uses the services.
#   with-services.sh COMMAND [ARG...]
#   with-services.sh --keep-services COMMAND [ARG...]   (make run, make shell: the services stay up after it)
#   with-services.sh --pytest-root-pass python -m pytest [ARG...]
# With --pytest-root-pass, the pytest command runs twice with the same services: as the analysis user on the tests
# not marked `root`, then as root on those marked `root` (they hide directories from workers in mount namespaces,
# which only root may make in the userland); a pass that selects no test (pytest's status 5) is not a failure unless
# both select none. Exits with the first failing pass's status.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root_pass=0
keep_services=0
if [ "${1:-}" = --pytest-root-pass ]; then root_pass=1; shift; fi
if [ "${1:-}" = --keep-services ]; then keep_services=1; shift; fi
# One session at a time: a session of another checkout would restart the services (for its own mounts) under this
# one. The lock is held on fd 8 for the command's whole run, which no child inherits (8>&-: the daemons outlive the
# session).
session_lock="${HEPVINE_SANDBOX_HOME:-/var/tmp/hepvine-sandbox}/session.lock"
mkdir -p "$(dirname "$session_lock")"
exec 8>"$session_lock"
if ! flock -n 8; then
    echo "sandbox: another session (make test, demo, chaos, bench, run or shell, maybe of another checkout) is" \
         "using the services; waiting for it to end ($session_lock)" >&2
    flock 8
fi
stop_services() { "$here/enter.sh" --root --no-build -- python3 "$here/services.py" stop 8>&-; }
"$here/enter.sh" --root -- python3 "$here/services.py" start 8>&- || exit 1
[ "$keep_services" = 1 ] || trap stop_services EXIT
trap 'exit 130' INT TERM
if [ "$root_pass" = 0 ]; then
    "$here/enter.sh" -- "$@" 8>&-
    exit $?
fi
"$here/enter.sh" -- "$@" -m "not root" 8>&-; user_status=$?
"$here/enter.sh" --root -- "$@" -m root 8>&-; root_status=$?
if [ "$user_status" = 5 ] && [ "$root_status" = 5 ]; then exit 5; fi
[ "$user_status" = 5 ] && user_status=0
[ "$root_status" = 5 ] && root_status=0
[ "$user_status" != 0 ] && exit "$user_status"
exit "$root_status"
