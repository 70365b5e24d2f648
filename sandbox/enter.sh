#!/usr/bin/env bash
# Run one command inside the sandbox userland: in a private mount namespace (every mount it makes vanishes with it,
# even when the command is killed), chrooted, with the repository at the same path as outside and the working
# directory kept, the venv active, and the services' file in $HEPVINE_SERVICES. Runs as the analysis user unless
# --root is given. Exits with the command's status.
# --no-build uses the newest userland already built instead of building one for the current recipe (to stop the
# services without a rebuild).
#   enter.sh [--root] [--no-build] -- COMMAND [ARG...]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

as_root=0
build=1
while [ $# -gt 0 ]; do
    case $1 in
        --root) as_root=1; shift ;;
        --no-build) build=0; shift ;;
        --) shift; break ;;
        *) die "enter.sh: unknown option '$1' (usage: enter.sh [--root] [--no-build] -- COMMAND...)" ;;
    esac
done
[ $# -gt 0 ] || die "enter.sh: no command given (usage: enter.sh [--root] [--no-build] -- COMMAND...)"
[ "$(id -u)" = 0 ] || die "entering the sandbox needs root (mount namespaces, chroot)"

if [ "$build" = 1 ]; then
    root=$("$SANDBOX_DIR/build.sh" | tail -1)
else
    built=$(ls -dt "$SANDBOX_HOME"/rootfs-*/.hepvine-built 2>/dev/null | head -1)
    [ -n "$built" ] || die "no sandbox has been built yet (make sandbox)"
    root=$(dirname "$built")
fi
workdir=$PWD
case $workdir in "$REPO_DIR"|"$REPO_DIR"/*) ;; *) workdir=$REPO_DIR ;; esac

exec unshare --mount --propagation private -- \
    bash -euo pipefail -c 'source "$1/lib.sh"; shift; run_in_userland "$@"' _ "$SANDBOX_DIR" "$root" "$as_root" "$workdir" "$@"
