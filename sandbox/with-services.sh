#!/usr/bin/env bash
# Run one command in the sandbox as the analysis user with the services up, then stop the services whatever
# happened (also on Ctrl-C). Exits with the command's status. Used by every make target that uses the services.
#   with-services.sh COMMAND [ARG...]
#   with-services.sh --keep-services COMMAND [ARG...]   (make run, make shell: the services stay up after it)
#   with-services.sh --pytest-passes N python -m pytest [ARG...]
# With --pytest-passes N (N > 0), the pytest command runs four times with the same services, three of them at once:
#   - the tests marked none of `pool`, `alone`, `root`, with N pytest-xdist workers (-n N --dist loadfile: a module's
#     tests on one worker, so its fixtures are made once), shown as they run;
#   - beside it, in one process, those marked `pool` (they use the whole HTCondor pool, or a directory other `pool`
#     tests use too: one at a time);
#   - beside both, as root, those marked `root` (they hide directories from workers in mount namespaces, which only
#     root may make in the userland);
#   - then, one by one, those marked `alone` (they look at every process or job of the machine: nothing else may run
#     beside them).
# The output of the two side passes is shown when the first pass has ended. With N=0 the four run one after another.
# A pass that selects no test (pytest's status 5) is not a failure unless all select none. Every pass runs; exits
# with the first failing pass's status.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
passes=0
workers=0
keep_services=0
if [ "${1:-}" = --pytest-passes ]; then passes=1; workers=$2; shift 2; fi
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
if [ "$passes" = 0 ]; then
    "$here/enter.sh" -- "$@" 8>&-
    exit $?
fi
statuses=()
PARALLEL="not pool and not alone and not root"
POOL="pool and not alone and not root"
if [ "$workers" -gt 0 ]; then
    logs=$(mktemp -d)
    # Each side pass in a session of its own (a script's background jobs ignore Ctrl-C): ended whole on Ctrl-C.
    setsid "$here/enter.sh" -- "$@" -m "$POOL" >"$logs/pool" 2>&1 8>&- &
    pool_pass=$!
    setsid "$here/enter.sh" --root -- "$@" -m root >"$logs/root" 2>&1 8>&- &
    root_pass=$!
    trap 'kill -TERM -- "-$pool_pass" "-$root_pass" 2>/dev/null; exit 130' INT TERM
    "$here/enter.sh" -- "$@" -n "$workers" --dist loadfile -m "$PARALLEL" 8>&-; statuses+=($?)
    wait "$pool_pass"; statuses+=($?)
    wait "$root_pass"; statuses+=($?)
    echo "--- beside the tests above, the tests marked pool, one at a time:"
    cat "$logs/pool"
    echo "--- and as root, the tests marked root:"
    cat "$logs/root"
    rm -rf "$logs"
else
    "$here/enter.sh" -- "$@" -m "$PARALLEL" 8>&-; statuses+=($?)
    "$here/enter.sh" -- "$@" -m "$POOL" 8>&-; statuses+=($?)
    "$here/enter.sh" --root -- "$@" -m root 8>&-; statuses+=($?)
fi
"$here/enter.sh" -- "$@" -m "alone and not root" 8>&-; statuses+=($?)
[ "${statuses[*]}" = "5 5 5 5" ] && exit 5
for status in "${statuses[@]}"; do
    [ "$status" = 0 ] || [ "$status" = 5 ] || exit "$status"
done
exit 0
