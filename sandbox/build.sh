#!/usr/bin/env bash
# Build the Debian trixie userland that runs hepvine's real stack (HTCondor, TaskVine, XRootD, the Python venv),
# or reuse the one already built from the same recipe. Prints the userland's path on its last line.
# Idempotent: the userland is cached under $HEPVINE_SANDBOX_HOME keyed by a hash of its recipe.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "building the sandbox needs root (debootstrap, chroot); run it as root"
root=$(sandbox_root)
mkdir -p "$SANDBOX_HOME"
exec 9>"$SANDBOX_HOME/build.lock"
flock 9
if [ -f "$root/.hepvine-built" ]; then echo "$root"; exit 0; fi

# The mirror is the host's own: never a registry host written into the repository.
host_mirror() {
    local uri
    uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)
    [ -n "$uri" ] || uri=$(grep -hsE '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1)
    [ -n "$uri" ] || die "cannot find a Debian mirror in the host's /etc/apt sources; set HEPVINE_DEBIAN_MIRROR"
    echo "$uri"
}
mirror=${HEPVINE_DEBIAN_MIRROR:-$(host_mirror)}
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

start=$(date +%s)
tmp=$root.partial
rm -rf "$tmp"
echo "sandbox: building the trixie userland in $tmp (mirror $mirror)" >&2
unshare --mount --propagation private -- debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$SANDBOX_HOME/debootstrap.log" 2>&1 \
    || die "debootstrap failed; see $SANDBOX_HOME/debootstrap.log"

# pip inside the userland must trust the host's CA bundle (the host reaches PyPI through a TLS-intercepting proxy).
mkdir -p "$tmp/usr/local/share/hepvine"
cp /etc/ssl/certs/ca-certificates.crt "$tmp/usr/local/share/hepvine/host-ca.crt"
cp "$SANDBOX_DIR/rucio-server.lock" "$tmp/usr/local/share/hepvine/rucio-server.lock"
packages=$(grep -vE '^\s*(#|$)' "$SANDBOX_DIR/packages.txt" | tr '\n' ' ')

# Everything else runs inside the userland, in a private mount namespace.
unshare --mount --propagation private -- bash -euo pipefail -c '
    source "$1/lib.sh"; tmp=$2; packages=$3
    mount_userland "$tmp"
    inside() { chroot "$tmp" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive PIP_CERT=/usr/local/share/hepvine/host-ca.crt \
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 "$@"; }
    # Daemons must not start while packages install: the services scripts start them, with our settings.
    printf "#!/bin/sh\nexit 101\n" >"$tmp/usr/sbin/policy-rc.d"; chmod +x "$tmp/usr/sbin/policy-rc.d"
    inside apt-get update -qq
    inside apt-get install -y -qq --no-install-recommends $packages >/dev/null
    inside apt-get clean
    inside useradd --create-home --uid "$SANDBOX_UID" --shell /bin/bash "$SANDBOX_USER"
    inside python3 -m venv --system-site-packages "$SANDBOX_VENV"
    inside python3 -m venv "$RUCIO_VENV"
    inside "$RUCIO_VENV/bin/pip" install -q -r /usr/local/share/hepvine/rucio-server.lock
    link_checkout "$tmp"
' _ "$SANDBOX_DIR" "$tmp" "$packages" >"$SANDBOX_HOME/build.log" 2>&1 || die "building the userland failed; see $SANDBOX_HOME/build.log"

touch "$tmp/.hepvine-built"
mv "$tmp" "$root"
# Keep only the userland of the current recipe: each takes about a gigabyte. Services still running from an older
# one (left up by `make shell` or `make run`) would lose their programs under them: stop them first (by the pids in
# the state), and keep a userland that something still runs in.
in_use() {
    local proc
    for proc in /proc/[0-9]*; do
        [ "$(readlink "$proc/root" 2>/dev/null)" = "$1" ] && return 0
    done
    return 1
}
for old in "$SANDBOX_HOME"/rootfs-*; do
    [ "$old" = "$root" ] && continue
    if in_use "$old"; then
        echo "sandbox: stopping the services that run from the previous userland before removing it" >&2
        "$SANDBOX_DIR/enter.sh" --root --no-build -- python3 "$SANDBOX_DIR/services.py" stop >&2 \
            || echo "sandbox: stopping them failed" >&2
    fi
    if in_use "$old"; then
        echo "sandbox: keeping $old: processes still run in it (stop them, then run make again)" >&2
        continue
    fi
    rm -rf --one-file-system "$old"
done
echo "sandbox: built in $(( $(date +%s) - start )) s" >&2
echo "$root"
