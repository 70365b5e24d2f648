# shellcheck shell=bash
# Shared definitions of the sandbox scripts: where the userland and its state live, and how to enter it.
# Sourced by build.sh, enter.sh; never run on its own.

SANDBOX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SANDBOX_DIR/.." && pwd)
# The executor plugin, its own distribution (not on PyPI): installed from this directory.
PLUGIN_DIR=$REPO_DIR/plugins/snakemake-executor-plugin-taskvine
SHARED_DIR=$(cd "$REPO_DIR/.." && pwd)/shared
# The cache of built userlands and the services' state live outside the checkout, so that a fresh clone reuses them.
SANDBOX_HOME=${HEPVINE_SANDBOX_HOME:-/var/tmp/hepvine-sandbox}
SANDBOX_STATE=$SANDBOX_HOME/state
# The analysis user that runs workflows and submits HTCondor jobs (HTCondor refuses jobs from root).
SANDBOX_USER=hepvine
SANDBOX_UID=2000
SANDBOX_VENV=/opt/hepvine-venv
# The sandbox's Rucio server has a venv of its own (its pins, sandbox/rucio-server.lock, are not hepvine's).
RUCIO_VENV=/opt/rucio-venv
# Inside the userland the services' state is mounted here; services.json there lists every port and directory.
SANDBOX_STATE_MOUNT=/srv/hepvine

die() { echo "sandbox: $*" >&2; exit 1; }

# The recipe's hash: everything that decides what the userland contains.
sandbox_key() {
    cat "$SANDBOX_DIR/build.sh" "$SANDBOX_DIR/packages.txt" "$REPO_DIR/pyproject.toml" "$PLUGIN_DIR/pyproject.toml" \
        "$REPO_DIR/requirements.lock" "$SANDBOX_DIR/rucio-server.lock" | sha256sum | cut -c1-16
}

sandbox_root() { echo "$SANDBOX_HOME/rootfs-$(sandbox_key)"; }

# mount_userland ROOT: mount what a userland needs. Call only inside a private mount namespace (unshare --mount),
# so that the mounts vanish with the namespace, even if the command is killed.
mount_userland() {
    local root=$1
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mkdir -p "$root$REPO_DIR" "$root$SANDBOX_STATE_MOUNT" "$SANDBOX_STATE"
    mount --bind "$REPO_DIR" "$root$REPO_DIR"
    mount --bind "$SANDBOX_STATE" "$root$SANDBOX_STATE_MOUNT"
    # ../shared beside the checkout (the real NanoAOD files of ../shared/nanoaod), read-only at the same path.
    if [ -d "$SHARED_DIR" ]; then
        mkdir -p "$root$SHARED_DIR"
        mount --bind "$SHARED_DIR" "$root$SHARED_DIR"
        mount -o remount,bind,ro "$root$SHARED_DIR"
    fi
    cp -f /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

# link_checkout ROOT [PIP OPTION...]: install this checkout's two distributions, the executor plugin and the
# workflow, editable into the venv of ROOT (mounted), in one pip command (so the plugin comes from its directory,
# never from a registry), and put their package directories on the venv's path in a plain .pth file, which pkgutil
# (so Snakemake's plugin discovery) sees; setuptools' own editable finders are invisible to it.
link_checkout() {
    local root=$1 site
    shift
    chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root PIP_CERT=/usr/local/share/hepvine/host-ca.crt \
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$SANDBOX_VENV/bin/pip" install -q "$@" \
        --config-settings editable_mode=compat -c "$REPO_DIR/requirements.lock" -e "$PLUGIN_DIR" \
        -e "$REPO_DIR[test,bench,recompress,rucio]" >&2
    site=$(echo "$root$SANDBOX_VENV"/lib/python3*/site-packages)
    printf '%s\n' "$REPO_DIR/workflows" "$PLUGIN_DIR" >"$site/hepvine-checkout.pth"
    echo "$REPO_DIR" >"$root$SANDBOX_VENV/.hepvine-checkout"
}

# run_in_userland ROOT AS_ROOT WORKDIR COMMAND...: run COMMAND chrooted in ROOT, in WORKDIR, as root (AS_ROOT=1) or
# as the analysis user. Call only inside a private mount namespace (see enter.sh).
run_in_userland() {
    local root=$1 as_root=$2 workdir=$3
    shift 3
    mount_userland "$root"
    local -a environment user
    environment=(LANG=C.UTF-8 TERM="${TERM:-dumb}" VIRTUAL_ENV="$SANDBOX_VENV"
        PATH="$SANDBOX_VENV/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        HEPVINE_SERVICES="$SANDBOX_STATE_MOUNT/services.json"
        CONDOR_CONFIG="$SANDBOX_STATE_MOUNT/condor/condor_config"
        PIP_CERT=/usr/local/share/hepvine/host-ca.crt CATALOG_HOST=127.0.0.1)
    # The checkout belongs to the host user, not to the analysis user; git (which Snakemake runs to list a
    # workflow's sources) must still read it, in the sandbox's shells and in the jobs HTCondor starts alike (a
    # submitted campaign's controller): the userland's system-wide git config lists it.
    grep -qxF "	directory = $REPO_DIR" "$root/etc/gitconfig" 2>/dev/null \
        || printf '[safe]\n\tdirectory = %s\n' "$REPO_DIR" >>"$root/etc/gitconfig"
    # The running services ports (the TaskVine catalog among them) override the defaults above.
    if [ -f "$SANDBOX_STATE/services.env" ]; then mapfile -t -O "${#environment[@]}" environment <"$SANDBOX_STATE/services.env"; fi
    # The venv holds the project installed editable; point it at this checkout if another one installed it last.
    if [ "$(cat "$root$SANDBOX_VENV/.hepvine-checkout" 2>/dev/null)" != "$REPO_DIR" ]; then
        link_checkout "$root" --no-deps --no-build-isolation
    fi
    # The analysis user writes results into the checkout: grant it access to what it does not own.
    local acl="u:$SANDBOX_UID:rwX,m::rwX"
    chroot "$root" /usr/bin/find "$REPO_DIR" -path "$REPO_DIR/.git" -prune -o ! -type l ! -user "$SANDBOX_UID" -print0 \
        | chroot "$root" /usr/bin/xargs -0 -r /usr/bin/setfacl -m "$acl"
    chroot "$root" /usr/bin/find "$REPO_DIR" -path "$REPO_DIR/.git" -prune -o -type d ! -user "$SANDBOX_UID" -print0 \
        | chroot "$root" /usr/bin/xargs -0 -r /usr/bin/setfacl -d -m "$acl"
    if [ "$as_root" = 1 ]; then
        user=(HOME=/root)
    else
        user=(HOME="/home/$SANDBOX_USER" USER="$SANDBOX_USER"
            /usr/bin/setpriv --reuid "$SANDBOX_UID" --regid "$SANDBOX_UID" --init-groups)
    fi
    exec chroot "$root" /usr/bin/env -i "${environment[@]}" "${user[@]}" \
        /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$workdir" "$@"
}
