#!/usr/bin/env bash
# Delete every built userland and the services' state (the demo dataset too). Stop the services first.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -d "$SANDBOX_HOME" ] || exit 0
# Refuse while anything is mounted below it in this namespace: rm would follow a bind mount into the checkout.
if findmnt -rn -o TARGET | grep -q "^$SANDBOX_HOME/"; then
    die "something is still mounted under $SANDBOX_HOME (see findmnt); not deleting it"
fi
rm -rf --one-file-system "$SANDBOX_HOME"
echo "sandbox: removed $SANDBOX_HOME" >&2
