"""Start, stop and report the sandbox's services: a personal HTCondor pool, a TaskVine catalog server on loopback, an
XRootD origin exporting /store, and one XCache per rack in front of it; for readers that authenticate, the same again
with GSI (an origin and a cache per rack that admit proxies of the test grid's test VO only) and with bearer tokens
(an origin and a cache per rack that admit tokens of the sandbox's issuer only); a second origin standing for another
site, and a Rucio server whose storage elements are the two origins (catalogue.py).

Runs inside the sandbox userland as root (``make services-start`` / ``make services-stop`` call it through
enter.sh). Every daemon is tracked by a pidfile and stopped by that pid; ``stop`` returns only when the daemons and
every process they had started (HTCondor's daemons and jobs among them) have exited, or says which have not.

Ports are chosen once per sandbox state and kept in ``ports.json`` in the state directory, so that a restart brings
every service back at the same address and the ``root://`` URLs recorded in results stay valid; deleting that file
picks new ones at the next start. The running services' ports and directories are written to ``services.json`` (and
the shell-style ``services.env``) in the state directory, the one place tests and workflows read them from.

    python3 services.py start | stop | status
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import catalogue  # this directory's: the sandbox's Rucio

STATE = Path(os.environ.get("HEPVINE_STATE_DIR", "/srv/hepvine"))
SERVICES_JSON = STATE / "services.json"
SERVICES_ENV = STATE / "services.env"
PORTS_JSON = STATE / "ports.json"
# ports.json as seen outside the sandbox (the state directory is $HEPVINE_SANDBOX_HOME/state, see lib.sh).
PORTS_JSON_OUTSIDE = "$HEPVINE_SANDBOX_HOME/state/ports.json, by default /var/tmp/hepvine-sandbox/state/ports.json"
PIDS = STATE / "pids"
LOGS = STATE / "logs"
ANALYSIS_USER = "hepvine"
RACKS = ("rack-a", "rack-b")
# HTCondor: two partitionable slots of 2 cores each (the machine has 2 cores; workers mostly wait on I/O).
CONDOR_SLOTS = 2
CONDOR_CPUS = 4
CONDOR_MEMORY_MB = 8192
WIDER_POOL_CONFIG = "bench/wider-pool.config"
# The services' ports, by name in ports.json.
GSI_RACKS = tuple(f"{rack}-gsi" for rack in RACKS)
TOKEN_RACKS = tuple(f"{rack}-token" for rack in RACKS)
PORT_NAMES = (
    *("collector", "catalog", "origin", *RACKS, "origin-gsi", *GSI_RACKS, "origin-token", "origin-b", "rucio"),
    *TOKEN_RACKS,
)
# The test grid: a CA of the sandbox's own, the XRootD host certificates it signs (the GSI origin's, the analysis
# user's; the GSI caches', the xrootd user's), a user certificate of the analysis user's (tests make X.509 proxies of
# it) and the caches' service certificate (a proxy of it is their identity when they read from the GSI origin). The
# GSI origin and caches accept only proxies of certificates this CA signed whose identity their grid map lists (and
# that carry the test VO's attributes, below).
GSI_SUBJECT = "/DC=org/DC=hepvine-sandbox"
GSI_USER_DN = f"{GSI_SUBJECT}/CN=Hepvine Analysis User"
GSI_CA_DN = f"{GSI_SUBJECT}/CN=Hepvine Sandbox Test CA"
GSI_CACHE_DN = f"{GSI_SUBJECT}/CN=Hepvine Sandbox XCache"
CACHE_USER = "xrootd"
# The sandbox's test VO: the GSI servers admit proxies with its VOMS attributes only, signed by the VOMS certificate
# of GSI_VOMS_HOST (voms-proxy-fake stands for its VOMS server); the other VO is one they can verify but do not admit.
GSI_VO = "hepvine"
GSI_OTHER_VO = "elsewhere"
GSI_VOMS_HOST = "voms.hepvine-sandbox"
# The token issuer: its keys and OpenID configuration are served over HTTPS by the token origin itself, at
# https://localhost:<port>/issuer/sandbox (what scitokens-cpp fetches to check a token's signature); tokens carry
# this audience and WLCG scopes under /store.
TOKEN_ISSUER_PATH = "/issuer/sandbox"
TOKEN_AUDIENCE = "hepvine-sandbox"
TOKEN_KEY_ID = "sandbox-1"
TOKEN_CACHE_SUBJECT = "hepvine-sandbox-xcache"  # the caches' own identity towards the token origin
TOKEN_CACHE_LIFETIME_S = 7 * 24 * 3600  # their token, minted at every start (as the GSI caches' service proxy)
# New ports are drawn from below Linux's default ephemeral range (32768-60999), so that outgoing connections do not
# take them while the services are down -- where the machine's range is the default (this VM's is 1024-65535: a
# connection may then hold a kept port for a while, which kept_ports waits out).
PORT_RANGE = (20000, 32767)
START_TIMEOUT_S = 90
# How long a daemon may take to exit after SIGTERM before it is killed, and how long `stop` waits in all for the
# daemons and every process they started.
STOP_TIMEOUT_S = 30
STOP_WAIT_S = 60
PORT_WAIT_S = 65  # a kept port that no process holds is waited for this long (TCP's TIME_WAIT is 60 s)
# The kernel's list of ports that outgoing connections never take as their local port.
RESERVED_PORTS = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
# The checkout these services belong to: their daemons (HTCondor's jobs among them) see the mounts of the session that
# started them, so a worker of services started from another checkout cannot see this one's workflow.
CHECKOUT = str(Path(__file__).resolve().parents[1])


def port_free(port: int) -> bool:
    """Whether a daemon could listen on PORT now (on every address, as XRootD does). The TIME_WAIT of a connection
    the daemon itself accepted does not count (the daemons reuse addresses); that of an outgoing connection which used
    PORT as its local port does, until it ends."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def port_holder(port: int) -> str | None:
    """Which process has a socket on local PORT ("pid N (command)"), from /proc; None when none is found."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] != "0":
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return f"pid {proc.name} ({command_line(int(proc.name))})"
        except OSError:
            continue
    return None


def pick_ports(count: int) -> list[int]:
    """COUNT different ports from PORT_RANGE that are free now."""
    chosen: list[int] = []
    for port in random.SystemRandom().sample(range(PORT_RANGE[0], PORT_RANGE[1] + 1), 200):
        if port_free(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise SystemExit(f"services: could not find {count} free ports in {PORT_RANGE[0]}-{PORT_RANGE[1]}")


def reserved(listed: str) -> set[int]:
    """The ports in LISTED, the kernel's form of a list of ports ("1000,2000-2010")."""
    ports: set[int] = set()
    for part in filter(None, listed.strip().split(",")):
        low, _, high = part.partition("-")
        ports.update(range(int(low), int(high or low) + 1))
    return ports


def reserve(ports: Iterable[int]) -> None:
    """Add PORTS to the machine's reserved ports (``ip_local_reserved_ports``), so that no outgoing connection takes
    one as its local port between the check that it is free and its daemon's start (this VM's ephemeral range covers
    PORT_RANGE: a start once failed with XRootD unable to bind its kept port). A daemon still binds it. Ports are never
    taken off the list: it guards them while the services are down too (ports.json deleted: the new ones are added, the
    old stay until the machine restarts). Where the list cannot be written (not root in the machine's network
    namespace), the check alone stands, and this says so."""
    try:
        listed = RESERVED_PORTS.read_text().strip()
        missing = sorted(set(ports) - reserved(listed))
        if missing:
            RESERVED_PORTS.write_text(",".join(filter(None, [listed, *map(str, missing)])))
    except OSError as e:
        print(
            f"services: the ports are not reserved from outgoing connections ({RESERVED_PORTS}: {e}; it needs root in "
            "the machine's network namespace): a daemon whose port a connection takes meanwhile fails to start; "
            "start again then",
            file=sys.stderr,
        )


def kept_ports() -> dict[str, int]:
    """The services' ports: those kept in ports.json, new ones (then kept there) for services it does not list yet.
    Stops with what to do when a kept port is taken by another program."""
    try:
        kept = json.loads(PORTS_JSON.read_text()) if PORTS_JSON.exists() else {}
        if not isinstance(kept, dict) or not all(isinstance(p, int) and 0 < p < 65536 for p in kept.values()):
            raise ValueError("not a JSON object of port numbers")
    except ValueError as e:
        raise SystemExit(
            f"services: {PORTS_JSON}: {e}; delete it to pick new ports at the next start (outside the "
            f"sandbox: {PORTS_JSON_OUTSIDE})"
        ) from e
    ports = {name: kept[name] for name in PORT_NAMES if name in kept}
    missing = [name for name in PORT_NAMES if name not in ports]
    if missing:
        fresh = pick_ports(len(missing) + len(ports))
        ports.update(zip(missing, [p for p in fresh if p not in ports.values()]))
        ports = {name: ports[name] for name in PORT_NAMES}
        PORTS_JSON.write_text(json.dumps(ports, indent=2) + "\n")
    reserve(ports.values())
    taken = [(name, port) for name, port in ports.items() if not port_free(port)]
    # A port no process holds is closing: a connection that used it as its local port (this machine's ephemeral
    # range, /proc/sys/net/ipv4/ip_local_port_range, may cover PORT_RANGE) lingers in TIME_WAIT for up to a minute.
    deadline = time.monotonic() + PORT_WAIT_S
    if taken and not any(port_holder(port) for _, port in taken):
        print(
            f"services: port(s) {', '.join(str(port) for _, port in taken)} still closing; waiting up to "
            f"{PORT_WAIT_S} s",
            file=sys.stderr,
        )
    while taken and time.monotonic() < deadline and not any(port_holder(port) for _, port in taken):
        time.sleep(1)
        taken = [(name, port) for name, port in taken if not port_free(port)]
    if taken:
        raise SystemExit(
            "services: "
            + "; ".join(
                f"port {port}, kept for {name} in {PORTS_JSON}, is taken"
                + (f" by {holder}" if (holder := port_holder(port)) else " by another program")
                for name, port in taken
            )
            + ". Stop the program that holds it, or delete ports.json to pick new ports at the next start (outside "
            f"the sandbox: {PORTS_JSON_OUTSIDE}; the root:// URLs recorded in earlier results then stop working)"
        )
    return ports


def owned_dir(path: Path, user: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process, alive
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def pidfile(name: str) -> Path:
    """Where daemon NAME's pid is kept: HTCondor and XRootD drop root, so theirs lie in directories they own."""
    if name == "condor_master":
        return STATE / "condor" / "run" / "condor_master.pid"
    if name.startswith("xrootd-"):
        return STATE / "xrootd" / name.removeprefix("xrootd-") / "xrootd.pid"
    if name == "rucio":  # gunicorn writes it as the analysis user
        return STATE / "rucio" / "gunicorn.pid"
    return PIDS / f"{name}.pid"


def read_pid(name: str) -> int | None:
    try:
        return int(pidfile(name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def wait_for(what: str, ready, timeout: float = START_TIMEOUT_S, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.25)
    hint = f"; its log: {log}" if log else ""
    raise SystemExit(f"services: {what} did not become ready within {timeout:.0f} s{hint}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def condor_config(port: int) -> str:
    condor = STATE / "condor"
    return f"""# Generated by sandbox/services.py: a personal HTCondor pool on loopback only.
include : /etc/condor/condor_config
use ROLE: Personal
LOCAL_DIR = {condor}
LOG = $(LOCAL_DIR)/log
SPOOL = $(LOCAL_DIR)/spool
EXECUTE = $(LOCAL_DIR)/execute
LOCK = $(LOCAL_DIR)/lock
RUN = $(LOCAL_DIR)/run
CRED_STORE_DIR = $(LOCAL_DIR)/cred_dir
NETWORK_INTERFACE = 127.0.0.1
CONDOR_HOST = 127.0.0.1
USE_SHARED_PORT = False
COLLECTOR_HOST = 127.0.0.1:{port}
use security:host_based
ALLOW_READ = 127.0.0.1
ALLOW_WRITE = 127.0.0.1
ALLOW_NEGOTIATOR = 127.0.0.1
ALLOW_ADMINISTRATOR = 127.0.0.1
# FS authentication alone fails for clients built against newer HTCondor (the PyPI bindings that the HTCondor
# executor plugin uses): "Directory name doesn't match server's network address". On a loopback-only pool,
# trusting the claimed user name is enough.
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, CLAIMTOBE
SEC_CLIENT_AUTHENTICATION_METHODS = FS, CLAIMTOBE
# The starter cannot unshare mount or pid namespaces here; without these every job is held.
MOUNT_UNDER_SCRATCH =
USE_PID_NAMESPACES = False
# Quick cycles, for tests and demos.
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_MIN_INTERVAL = 1
# HTCondor starts a negotiation cycle at most this often (default 20 s: a worker job waited 16-20 s to be matched).
NEGOTIATOR_CYCLE_DELAY = 1
SCHEDD_INTERVAL = 2
UPDATE_INTERVAL = 2
STARTER_UPDATE_INTERVAL = 2
SHADOW_QUEUE_UPDATE_INTERVAL = 2
# A graceful shutdown (SIGTERM to the master) turns hard after this many seconds instead of HTCondor's 30 minutes
# (jobs that ignore their SIGTERM), within the time services.py gives the master to exit.
SHUTDOWN_GRACEFUL_TIMEOUT = {STOP_TIMEOUT_S * 2 // 3}
NUM_CPUS = {CONDOR_CPUS}
MEMORY = {CONDOR_MEMORY_MB}
SLOT_TYPE_1 = cpus={100 // CONDOR_SLOTS}%, memory={100 // CONDOR_SLOTS}%, disk={100 // CONDOR_SLOTS}%
SLOT_TYPE_1_PARTITIONABLE = True
NUM_SLOTS_TYPE_1 = {CONDOR_SLOTS}
# Each slot stands for one rack (site-configs/sandbox.yaml): workers are sent to a rack by requiring HepvineRack.
STARTD_ATTRS = $(STARTD_ATTRS) HepvineRack
{chr(10).join(f'SLOT{i + 1}_HepvineRack = "{rack}"' for i, rack in enumerate(RACKS))}
START = True
SUSPEND = False
PREEMPT = False
KILL = False
MAIL = /bin/true
# HTCondor reads these directories after this file, in this order: Debian's defaults (its security settings win over
# this file's), the sandbox's settings that must come after them, and a directory of the analysis user's where a
# bench that needs a wider pool (benchmarks/many_workers.py --via condor) writes NUM_CPUS and MEMORY for its run
# and restarts the startd (it removes the file after).
LOCAL_CONFIG_DIR = /etc/condor/config.d, $(LOCAL_DIR)/config.d, $(LOCAL_DIR)/bench
HEPVINE_WIDER_POOL_CONFIG = $(LOCAL_DIR)/{WIDER_POOL_CONFIG}
"""


AFTER_DEBIAN_CONFIG = f"""# Generated by sandbox/services.py: read after Debian's /etc/condor/config.d.
# The analysis user is this personal pool's administrator, as the user who starts a personal HTCondor is (a bench
# restarts the startd to widen the pool).
ALLOW_ADMINISTRATOR = $(ALLOW_ADMINISTRATOR) {ANALYSIS_USER}@*
"""


def origin_config(port: int, data: Path, admin: Path) -> str:
    return f"""# Generated by sandbox/services.py: the XRootD origin of the sandbox.
all.export /store
oss.localroot {data}
xrd.port {port}
all.adminpath {admin}
all.pidpath {admin}
xrd.allow host localhost
ofs.trace open
"""


def cache_config(port: int, origin_port: int, cache: Path, admin: Path) -> str:
    return f"""# Generated by sandbox/services.py: an XCache in front of the sandbox's origin.
all.export /store
ofs.osslib libXrdPss.so
pss.cachelib libXrdPfc.so
pss.origin 127.0.0.1:{origin_port}
oss.localroot {cache}
pfc.ram 1g
pfc.diskusage 0.90 0.95
xrd.port {port}
all.adminpath {admin}
all.pidpath {admin}
xrd.allow host localhost
"""


def gsi_only(gsi: dict, host: str) -> str:
    """Configuration lines that admit GSI readers only, the server presenting the host certificate HOST
    (``host`` or ``cachehost``): a valid proxy of a certificate the sandbox's CA signed (-ca:2: the chain must
    verify), whose identity the grid map lists (-gmapopt:2: unmapped identities are refused), with VOMS attributes
    that XRootD's VOMS plugin verifies (-vomsat:2: a proxy without them is refused; the server's environment names
    the VOMS directory, gsi_env); reading /store is for members of the test VO only (the authorisation database);
    no CRLs in the test grid."""
    options = [f"-certdir:{gsi['certdir']}", f"-cert:{gsi[host + 'cert']}", f"-key:{gsi[host + 'key']}"]
    options += [f"-gridmap:{gsi['gridmap']}", "-gmapopt:2", "-ca:2", "-crl:0", "-dlgpxy:0"]
    options += ["-vomsfun:libXrdVoms.so", "-vomsat:2"]
    return f"""# GSI only, the test VO's members only.
xrootd.seclib libXrdSec.so
sec.protocol gsi {" ".join(options)}
sec.protbind * only gsi
ofs.authorize 1
acc.authdb {gsi["authdb"]}
acc.audit deny
"""


def gsi_env(gsi: dict) -> dict[str, str]:
    """The environment of a GSI server: where the VOMS plugin finds the VOMS servers' descriptions and the CAs."""
    return {"X509_VOMS_DIR": gsi["vomsdir"], "X509_CERT_DIR": gsi["certdir"]}


def gsi_origin_config(port: int, data: Path, admin: Path, gsi: dict) -> str:
    """The origin's configuration, for readers that authenticate with GSI only."""
    return origin_config(port, data, admin) + gsi_only(gsi, "host")


def gsi_cache_config(port: int, origin_port: int, cache: Path, admin: Path, gsi: dict) -> str:
    """An XCache in front of the GSI origin that admits GSI readers only; it reads from the origin as itself, with
    the proxy of its service certificate that its environment names (start_xrootd's ENV), never with its readers'."""
    return cache_config(port, origin_port, cache, admin) + gsi_only(gsi, "cachehost")


def token_only(gsi: dict, tokens: dict, host: str) -> str:
    """Configuration lines that admit readers with a WLCG bearer token only (XRootD's ztn protocol, which sends the
    token over TLS only: every connection must use TLS, the server presenting the host certificate HOST, ``host`` or
    ``cachehost``), checked by the SciTokens plugin against the issuer's keys (fetched over HTTPS from the token
    origin, verified with the test grid's CA)."""
    return f"""# Bearer tokens only.
xrd.tls {gsi[host + "cert"]} {gsi[host + "key"]}
xrd.tlsca certfile {gsi["cafile"]}
xrootd.tls all
xrootd.seclib libXrdSec.so
sec.protocol ztn
sec.protbind * only ztn
ofs.authorize 1
acc.authdb {tokens["authdb"]}
ofs.authlib ++ libXrdAccSciTokens.so config={tokens["scitokens_config"]}
"""


def token_origin_config(port: int, data: Path, admin: Path, gsi: dict, tokens: dict) -> str:
    """The origin's configuration for readers with a bearer token only (token_only); HTTPS on the same port serves
    the issuer's files (/issuer, readable by anyone)."""
    return f"""# Generated by sandbox/services.py: the XRootD origin for token readers.
all.export /store
all.export /issuer
oss.localroot {data}
xrd.port {port}
all.adminpath {admin}
all.pidpath {admin}
xrd.allow host localhost
xrd.protocol XrdHttp:{port} libXrdHttp.so
ofs.trace open
""" + token_only(gsi, tokens, "host")


def token_cache_config(port: int, origin_port: int, cache: Path, admin: Path, gsi: dict, tokens: dict) -> str:
    """An XCache in front of the token origin that admits token readers only; it reads from the origin as itself,
    with the token of its own that its environment names (BEARER_TOKEN_FILE, start_xrootd's ENV), never with its
    readers'."""
    return cache_config(port, origin_port, cache, admin) + token_only(gsi, tokens, "cachehost")


def cache_token(tokens: dict, out: Path) -> Path:
    """The token caches' own token (subject TOKEN_CACHE_SUBJECT, reading anything under /store), minted at every
    start and readable by the caches' user only: their identity towards the token origin."""
    from hepvine.devtools import tokens as issuer  # the sandbox's issuer, as the tests and the demo mint with

    issuer.write(out, issuer.mint(tokens, TOKEN_CACHE_LIFETIME_S, subject=TOKEN_CACHE_SUBJECT))
    entry = pwd.getpwnam(CACHE_USER)
    os.chown(out, entry.pw_uid, entry.pw_gid)
    return out


def token_material(base: Path, data: Path, issuer_url: str) -> dict:
    """The token issuer's signing key (EC P-256; made once, kept), its public key as a JWKS and its OpenID
    configuration under DATA/issuer (served by the token origin), the SciTokens plugin's configuration and the
    authorisation database (anyone may read the issuer's files; /store needs a token)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    base.mkdir(parents=True, exist_ok=True)
    key_file = base / "issuer.key"
    if not key_file.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    entry = pwd.getpwnam(ANALYSIS_USER)
    os.chown(key_file, entry.pw_uid, entry.pw_gid)  # the analysis user mints the tests' and the demo's tokens
    key_file.chmod(0o400)
    numbers = serialization.load_pem_private_key(key_file.read_bytes(), None).public_key().public_numbers()

    def b64(n: int) -> str:
        return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()

    jwk = {"kty": "EC", "crv": "P-256", "x": b64(numbers.x), "y": b64(numbers.y), "kid": TOKEN_KEY_ID, "alg": "ES256"}
    served = owned_dir(data / TOKEN_ISSUER_PATH.strip("/"), ANALYSIS_USER)
    owned_dir(served / ".well-known", ANALYSIS_USER)
    (served / "jwks").write_text(json.dumps({"keys": [{**jwk, "use": "sig"}]}))
    (served / ".well-known" / "openid-configuration").write_text(
        json.dumps({"issuer": issuer_url, "jwks_uri": f"{issuer_url}/jwks"})
    )
    config, authdb = base / "scitokens.cfg", base / "authdb"
    config.write_text(
        f"[Global]\naudience = {TOKEN_AUDIENCE}\n\n[Issuer sandbox]\nissuer = {issuer_url}\nbase_path = /store\n"
    )
    authdb.write_text("u * /issuer lr\n")
    return {
        "issuer": issuer_url,
        "audience": TOKEN_AUDIENCE,
        "key_id": TOKEN_KEY_ID,
        "signing_key": str(key_file),
        "scitokens_config": str(config),
        "authdb": str(authdb),
    }


def key_cache_dir(path: Path, user: str) -> Path:
    """The directory (XDG_CACHE_HOME) where a token server's SciTokens plugin keeps the issuer's keys, emptied: a
    restarted sandbox may have made a new issuer key."""
    owned_dir(path, user)
    for old in path.rglob("*.sqllite"):
        old.unlink()
    return path


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout


def gsi_material(base: Path) -> dict:
    """The test grid's CA (in an X509_CERT_DIR layout), the host certificate and key of the GSI origin (the analysis
    user's, who runs it), the analysis user's certificate and key, the test VO's VOMS certificate and directory, the
    grid map and the authorisation database: made once, kept across starts; and the caches' service proxy, made
    anew at every start."""
    base.mkdir(parents=True, exist_ok=True)
    certdir, user_dir = base / "certificates", owned_dir(base / "user", ANALYSIS_USER)
    certdir.mkdir(exist_ok=True)
    ca_key, ca = base / "ca.key", base / "ca.pem"
    subject = GSI_SUBJECT
    if not ca.exists():
        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(ca_key),
            "-out",
            str(ca),
            "-days",
            "3650",
            "-subj",
            GSI_CA_DN,
            "-addext",
            "basicConstraints=critical,CA:true",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        )
        ca_key.chmod(0o600)
    digest = openssl("x509", "-hash", "-noout", "-in", str(ca)).strip()
    (certdir / f"{digest}.0").write_bytes(ca.read_bytes())

    def issue(name: str, cn: str, directory: Path, extensions: str, owner: str = ANALYSIS_USER) -> tuple[Path, Path]:
        key, cert, request = directory / f"{name}key.pem", directory / f"{name}cert.pem", directory / f"{name}.csr"
        if not cert.exists():
            openssl(
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(request),
                "-subj",
                f"{subject}/CN={cn}",
            )
            ext = directory / f"{name}.ext"
            ext.write_text(extensions)
            openssl(
                "x509",
                "-req",
                "-in",
                str(request),
                "-CA",
                str(ca),
                "-CAkey",
                str(ca_key),
                "-CAcreateserial",
                "-out",
                str(cert),
                "-days",
                "3650",
                "-extfile",
                str(ext),
            )
            request.unlink()
        entry = pwd.getpwnam(owner)
        for path in (key, cert):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        key.chmod(0o400)
        cert.chmod(0o644)
        return cert, key

    host = "basicConstraints=CA:false\nkeyUsage=digitalSignature,keyEncipherment\n"
    host += "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
    user = "basicConstraints=CA:false\nkeyUsage=digitalSignature,keyEncipherment,dataEncipherment\n"
    hostcert, hostkey = issue("host", "localhost", owned_dir(base / "host", ANALYSIS_USER), host)
    cache_dir = owned_dir(base / "xcache", CACHE_USER)
    cachehostcert, cachehostkey = issue("cachehost", "localhost", cache_dir, host, CACHE_USER)
    servicecert, servicekey = issue("service", GSI_CACHE_DN.rsplit("CN=", 1)[1], cache_dir, user, CACHE_USER)
    usercert, userkey = issue("user", GSI_USER_DN.rsplit("CN=", 1)[1], user_dir, user)
    # The test VO's VOMS certificate (the analysis user's, who makes the tests' and the demo's proxies with it), and
    # the VOMS directory that lets the servers verify its attribute certificates, for the test VO and the other.
    vomscert, vomskey = issue("voms", GSI_VOMS_HOST, owned_dir(base / "voms", ANALYSIS_USER), host)
    vomsdir = base / "vomsdir"
    for vo in (GSI_VO, GSI_OTHER_VO):
        (vomsdir / vo).mkdir(parents=True, exist_ok=True)
        (vomsdir / vo / f"{GSI_VOMS_HOST}.lsc").write_text(f"{GSI_SUBJECT}/CN={GSI_VOMS_HOST}\n{GSI_CA_DN}\n")
    gridmap, authdb = base / "grid-mapfile", base / "authdb"
    gridmap.write_text(f'"{GSI_USER_DN}" {ANALYSIS_USER}\n"{GSI_CACHE_DN}" {CACHE_USER}\n')
    authdb.write_text(f"o {GSI_VO} /store lr\n")
    material = {
        "certdir": str(certdir),
        "cafile": str(ca),
        "hostcert": str(hostcert),
        "hostkey": str(hostkey),
        "cachehostcert": str(cachehostcert),
        "cachehostkey": str(cachehostkey),
        "usercert": str(usercert),
        "userkey": str(userkey),
        "user_dn": GSI_USER_DN,
        "cache_dn": GSI_CACHE_DN,
        "gridmap": str(gridmap),
        "authdb": str(authdb),
        "vo": GSI_VO,
        "other_vo": GSI_OTHER_VO,
        "voms_host": GSI_VOMS_HOST,
        "vomscert": str(vomscert),
        "vomskey": str(vomskey),
        "vomsdir": str(vomsdir),
    }
    material["cache_proxy"] = str(service_proxy(material, servicecert, servicekey, cache_dir / "x509up"))
    return material


def service_proxy(gsi: dict, cert: Path, key: Path, out: Path) -> Path:
    """A proxy of the caches' service certificate with the test VO's attributes, valid for a week, made at every
    start (as a site's XCache gets one of its VO): the caches' identity towards the GSI origin; the caches' user's
    only. voms-proxy-fake reads only keys of the user who runs it: it runs as root here, on copies of the two keys
    in a directory of root's."""
    from hepvine.devtools import proxies  # as the tests and the demo make theirs

    with tempfile.TemporaryDirectory() as keys:
        own_key, voms_key = Path(keys) / "key.pem", Path(keys) / "vomskey.pem"
        shutil.copyfile(key, own_key)
        shutil.copyfile(gsi["vomskey"], voms_key)
        for copy in (own_key, voms_key):
            copy.chmod(0o400)
        proxies.make({**gsi, "vomskey": str(voms_key)}, out, hours=168, cert=str(cert), key=str(own_key))
    entry = pwd.getpwnam(CACHE_USER)
    os.chown(out, entry.pw_uid, entry.pw_gid)
    return out


def start_xrootd(name: str, config: str, user: str, env: dict[str, str] | None = None, wholly: bool = False) -> dict:
    """Start XRootD instance NAME with CONFIG as USER (ENV added to its environment); where its files are. XRootD
    drops root itself (``-R``), keeping it as its real user; WHOLLY starts it as USER from the start instead, so that
    USER may also signal it (the second site's server, which the failover demo takes down)."""
    base = owned_dir(STATE / "xrootd" / name, user)
    admin = owned_dir(base / "admin", user)
    cfg = base / "xrootd.cfg"
    cfg.write_text(config)
    entry = pwd.getpwnam(user)
    as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []} if wholly else {}
    subprocess.run(
        [
            "xrootd",
            "-b",
            *([] if wholly else ["-R", user]),
            "-n",
            name,
            "-c",
            str(cfg),
            "-l",
            str(base / "xrootd.log"),
            "-s",
            str(pidfile(f"xrootd-{name}")),
        ],
        check=True,
        env={**os.environ, **(env or {})},
        **as_user,
    )
    # With -n, XRootD puts its log in a directory named for the instance.
    return {"config": str(cfg), "admin": str(admin), "log": str(base / name / "xrootd.log")}


def start() -> None:
    if SERVICES_JSON.exists() and all(running().values()):
        started_from = json.loads(SERVICES_JSON.read_text()).get("checkout")
        if started_from == CHECKOUT:
            print("services: already running", file=sys.stderr)
            if PORTS_JSON.exists():  # (services started before their ports were reserved)
                reserve(json.loads(PORTS_JSON.read_text()).values())
            return
        owner = f"the checkout {started_from}" if started_from else "a checkout this hepvine did not record"
        print(
            f"services: running for {owner}, whose mounts their workers see, not {CHECKOUT}'s: "
            "restarting them for this one",
            file=sys.stderr,
        )
    stop(quiet=True)
    # Daemons leave files in their working directory (the catalog's history, XRootD's instance directory).
    STATE.mkdir(parents=True, exist_ok=True)
    os.chdir(STATE)
    try:
        start_all()
    except BaseException:
        # Leave nothing half-started behind.
        stop(quiet=True)
        raise


def start_all() -> None:
    for d in (PIDS, LOGS):
        d.mkdir(parents=True, exist_ok=True)
    LOGS.chmod(0o755)
    ports = kept_ports()
    collector, catalog, origin = ports["collector"], ports["catalog"], ports["origin"]
    caches = [ports[rack] for rack in RACKS]

    # HTCondor personal pool.
    condor = STATE / "condor"
    for sub in ("log", "spool", "execute", "lock", "run", "cred_dir"):
        owned_dir(condor / sub, "condor")
    (condor / "execute").chmod(0o755)
    owned_dir(condor / "bench", ANALYSIS_USER)
    (condor / "config.d").mkdir(exist_ok=True)
    (condor / "config.d" / "90-sandbox.config").write_text(AFTER_DEBIAN_CONFIG)
    (condor / "condor_config").write_text(condor_config(collector))
    env = dict(os.environ, CONDOR_CONFIG=str(condor / "condor_config"))
    subprocess.run(["condor_master", "-pidfile", str(pidfile("condor_master"))], check=True, env=env)

    # TaskVine catalog server on loopback, so that no manager, factory or worker reports to a public catalog.
    catalog_log = LOGS / "catalog_server.log"
    subprocess.run(
        [
            "catalog_server",
            "-b",
            "-B",
            str(pidfile("catalog_server")),
            "-p",
            str(catalog),
            "-I",
            "127.0.0.1",
            "-o",
            str(catalog_log),
            "-u",
            f"127.0.0.1:{catalog}",
        ],
        check=True,
    )

    # XRootD origin (runs as the analysis user, who owns the data) and one XCache per rack.
    data = owned_dir(STATE / "xrootd" / "origin" / "data", ANALYSIS_USER)
    owned_dir(data / "store", ANALYSIS_USER)
    origin_admin = STATE / "xrootd" / "origin" / "admin"
    info = {
        "state_dir": str(STATE),
        "checkout": CHECKOUT,
        "ports_file": str(PORTS_JSON),
        "user": ANALYSIS_USER,
        "condor": {
            "collector": f"127.0.0.1:{collector}",
            "config": str(condor / "condor_config"),
            "log_dir": str(condor / "log"),
            "slots": CONDOR_SLOTS,
        },
        "catalog": {"host": "127.0.0.1", "port": catalog, "address": f"127.0.0.1:{catalog}", "log": str(catalog_log)},
        "xrootd": {
            "origin": {
                "url": f"root://127.0.0.1:{origin}",
                "port": origin,
                "data_dir": str(data),
                **start_xrootd("origin", origin_config(origin, data, origin_admin), ANALYSIS_USER),
            },
            "caches": {},
        },
    }
    gsi = gsi_material(STATE / "gsi")
    gsi_port, gsi_admin = ports["origin-gsi"], STATE / "xrootd" / "origin-gsi" / "admin"
    info["xrootd"]["origin_gsi"] = {
        "url": f"root://127.0.0.1:{gsi_port}",
        "port": gsi_port,
        "data_dir": str(data),
        "gsi": gsi,
        **start_xrootd("origin-gsi", gsi_origin_config(gsi_port, data, gsi_admin, gsi), ANALYSIS_USER, gsi_env(gsi)),
    }
    for rack, port in zip(RACKS, caches):
        cache_dir = owned_dir(STATE / "xrootd" / rack / "cache", CACHE_USER)
        admin = STATE / "xrootd" / rack / "admin"
        info["xrootd"]["caches"][rack] = {
            "url": f"root://127.0.0.1:{port}",
            "port": port,
            "rack": rack,
            "cache_dir": str(cache_dir),
            **start_xrootd(rack, cache_config(port, origin, cache_dir, admin), CACHE_USER),
        }
    # The GSI caches: the same racks in front of the GSI origin, GSI readers only; each reads from the origin with
    # the caches' service proxy (X509_USER_PROXY in its environment), verifying it against the test grid's CA.
    info["xrootd"]["caches_gsi"] = {}
    cache_env = {"X509_USER_PROXY": gsi["cache_proxy"], **gsi_env(gsi)}
    for rack, name in zip(RACKS, GSI_RACKS):
        port = ports[name]
        cache_dir = owned_dir(STATE / "xrootd" / name / "cache", CACHE_USER)
        config = gsi_cache_config(port, gsi_port, cache_dir, STATE / "xrootd" / name / "admin", gsi)
        info["xrootd"]["caches_gsi"][rack] = {
            "url": f"root://127.0.0.1:{port}",
            "port": port,
            "rack": rack,
            "cache_dir": str(cache_dir),
            **start_xrootd(name, config, CACHE_USER, cache_env),
        }

    # The token origin: the same data again, for readers with a bearer token of the sandbox's issuer. The SciTokens
    # plugin keeps the issuer's keys in a cache of its own (emptied at each start).
    token_port = ports["origin-token"]
    base = owned_dir(STATE / "xrootd" / "origin-token", ANALYSIS_USER)
    tokens = token_material(STATE / "tokens", data, f"https://localhost:{token_port}{TOKEN_ISSUER_PATH}")
    key_cache = key_cache_dir(base / "scitokens-cache", ANALYSIS_USER)
    config = token_origin_config(token_port, data, base / "admin", gsi, tokens)
    info["xrootd"]["origin_token"] = {
        "url": f"root://127.0.0.1:{token_port}",
        "port": token_port,
        "data_dir": str(data),
        "tokens": tokens,
        **start_xrootd("origin-token", config, ANALYSIS_USER, {"XDG_CACHE_HOME": str(key_cache)}),
    }
    # The token caches: the same racks in front of the token origin, token readers only; each reads from the origin
    # with the caches' own token (BEARER_TOKEN_FILE in its environment), over TLS verified against the test grid's CA.
    info["xrootd"]["caches_token"] = {}
    token_dir = owned_dir(STATE / "tokens" / "xcache", CACHE_USER)
    cache_env = {"BEARER_TOKEN_FILE": str(cache_token(tokens, token_dir / "bt")), "X509_CERT_DIR": gsi["certdir"]}
    for rack, name in zip(RACKS, TOKEN_RACKS):
        port = ports[name]
        cache_dir = owned_dir(STATE / "xrootd" / name / "cache", CACHE_USER)
        key_cache = key_cache_dir(STATE / "xrootd" / name / "scitokens-cache", CACHE_USER)
        config = token_cache_config(port, token_port, cache_dir, STATE / "xrootd" / name / "admin", gsi, tokens)
        info["xrootd"]["caches_token"][rack] = {
            "url": f"root://127.0.0.1:{port}",
            "port": port,
            "rack": rack,
            "cache_dir": str(cache_dir),
            **start_xrootd(name, config, CACHE_USER, {**cache_env, "XDG_CACHE_HOME": str(key_cache)}),
        }

    # A second origin on data of its own, standing for another site: Rucio's second storage element.
    data_b = owned_dir(STATE / "xrootd" / "origin-b" / "data", ANALYSIS_USER)
    owned_dir(data_b / "store", ANALYSIS_USER)
    port_b = ports["origin-b"]
    info["xrootd"]["origin_b"] = {
        "url": f"root://127.0.0.1:{port_b}",
        "port": port_b,
        "data_dir": str(data_b),
        **start_xrootd(
            "origin-b",
            origin_config(port_b, data_b, STATE / "xrootd" / "origin-b" / "admin"),
            ANALYSIS_USER,
            wholly=True,
        ),
    }
    analysis_user = pwd.getpwnam(ANALYSIS_USER)
    storage = {
        rse: {key: info["xrootd"][name.replace("-", "_")][key] for key in ("url", "port", "data_dir")} | {"site": name}
        for rse, name in catalogue.STORAGE.items()
    }
    info["rucio"] = catalogue.start(
        owned_dir(STATE / "rucio", ANALYSIS_USER), ports["rucio"], analysis_user, pidfile("rucio"), storage, gsi
    )

    for port, what, log in [
        (catalog, "the TaskVine catalog server", catalog_log),
        (origin, "the XRootD origin", Path(info["xrootd"]["origin"]["log"])),
        (gsi_port, "the GSI XRootD origin", Path(info["xrootd"]["origin_gsi"]["log"])),
        (token_port, "the token XRootD origin", Path(info["xrootd"]["origin_token"]["log"])),
        (port_b, "the second site's XRootD origin", Path(info["xrootd"]["origin_b"]["log"])),
        (ports["rucio"], "the Rucio server", Path(info["rucio"]["log"])),
        *[(c["port"], f"XCache {r}", Path(c["log"])) for r, c in info["xrootd"]["caches"].items()],
        *[(c["port"], f"GSI XCache {r}", Path(c["log"])) for r, c in info["xrootd"]["caches_gsi"].items()],
        *[(c["port"], f"token XCache {r}", Path(c["log"])) for r, c in info["xrootd"]["caches_token"].items()],
    ]:
        wait_for(what, lambda p=port: port_open(p), log=log)
    wait_for(f"the HTCondor pool ({CONDOR_SLOTS} slots)", lambda: condor_slots(env) >= CONDOR_SLOTS, log=condor / "log")
    catalogue.set_up(info["rucio"], analysis_user)

    SERVICES_JSON.write_text(json.dumps(info, indent=2) + "\n")
    SERVICES_ENV.write_text(
        f"CATALOG_HOST=127.0.0.1\nCATALOG_PORT={catalog}\n"
        f"HEPVINE_XROOTD_ORIGIN=root://127.0.0.1:{origin}\n"
        f"HEPVINE_XROOTD_ORIGIN_GSI=root://127.0.0.1:{gsi_port}\n"
        f"HEPVINE_XROOTD_ORIGIN_TOKEN=root://127.0.0.1:{token_port}\n"
        f"HEPVINE_XROOTD_ORIGIN_B=root://127.0.0.1:{port_b}\n"
        # Rucio's client (hepvine's, the `rucio` command) reads the sandbox server's address and login from here.
        f"RUCIO_CONFIG={info['rucio']['config']}\n"
        # XRootD's GSI clients verify servers against the test grid's CA.
        f"X509_CERT_DIR={gsi['certdir']}\n"
        + "".join(
            f"HEPVINE_XCACHE_{r.upper().replace('-', '_')}{suffix}=root://127.0.0.1:{c['port']}\n"
            f"HEPVINE_XCACHE_{r.upper().replace('-', '_')}{suffix}_DISK={c['cache_dir']}\n"
            for key, suffix in (("caches", ""), ("caches_gsi", "_GSI"), ("caches_token", "_TOKEN"))
            for r, c in info["xrootd"][key].items()
        )
    )
    print(
        f"services: up (collector 127.0.0.1:{collector}, catalog {catalog}, origin {origin}, "
        f"caches {', '.join(f'{r}={p}' for r, p in zip(RACKS, caches))})",
        file=sys.stderr,
    )


def condor_slots(env: dict) -> int:
    result = subprocess.run(["condor_status", "-af", "Name"], capture_output=True, text=True, env=env)
    return len(result.stdout.split()) if result.returncode == 0 else 0


def daemon_names() -> list[str]:
    """The pidfile names of the services' daemons, HTCondor's first: one a port of PORT_NAMES, every port not the
    pool's, the catalog's or Rucio's an XRootD server's."""
    others = {"collector": "condor_master", "catalog": "catalog_server", "rucio": "rucio"}
    return [*others.values(), *[f"xrootd-{name}" for name in PORT_NAMES if name not in others]]


def running() -> dict[str, bool]:
    return {name: bool((pid := read_pid(name)) and pid_alive(pid)) for name in daemon_names()}


def command_line(pid: int) -> str:
    try:
        text = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").split())
    except OSError:
        return "?"
    return text if len(text) <= 100 else text[:97] + "..."


def process_tree(pid: int) -> dict[int, str]:
    """PID and every process descended from it now, with their command lines."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(proc.name))
    tree, todo = {}, [pid]
    while todo:
        p = todo.pop()
        if p not in tree:
            tree[p] = command_line(p)
            todo.extend(children.get(p, []))
    return tree


def wait_gone(pids, deadline: float) -> list[int]:
    """Wait until every one of PIDS has exited or DEADLINE (time.monotonic) passes; those still alive."""
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def stop(quiet: bool = False) -> None:
    """Stop every daemon by its pid and wait, at most STOP_WAIT_S in all, until it and every process it started
    (HTCondor's daemons and jobs, say) have exited; stops with their names when some are still running then."""
    began = time.monotonic()
    deadline = began + STOP_WAIT_S
    started: dict[int, str] = {}
    # HTCondor first: its graceful shutdown ends the jobs (and so the TaskVine workers) it runs.
    for name in daemon_names():
        pid = read_pid(name)
        if pid and pid_alive(pid):
            started.update(process_tree(pid))
            os.kill(pid, signal.SIGTERM)
            if wait_gone([pid], min(time.monotonic() + STOP_TIMEOUT_S, deadline)):
                print(
                    f"services: {name} (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT_S} s; killing it", file=sys.stderr
                )
                started.update(process_tree(pid))
                os.kill(pid, signal.SIGKILL)
        pidfile(name).unlink(missing_ok=True)
    # What a daemon started may outlive it (its children still exiting, or orphaned when it was killed); nothing
    # else will stop those, so they are asked too, and waited for.
    for pid in wait_gone(started, time.monotonic()):
        signal_quietly(pid, signal.SIGTERM)
    left = wait_gone(started, deadline)
    if left:
        print(
            f"services: still running {STOP_WAIT_S} s after the stop, killed now: "
            + ", ".join(f"pid {p} ({started[p]})" for p in left),
            file=sys.stderr,
        )
        for pid in left:
            signal_quietly(pid, signal.SIGKILL)
        left = wait_gone(left, time.monotonic() + 5)
    SERVICES_JSON.unlink(missing_ok=True)
    SERVICES_ENV.unlink(missing_ok=True)
    if left:
        raise SystemExit("services: these survived SIGKILL: " + ", ".join(f"pid {p} ({started[p]})" for p in left))
    if not quiet:
        print(
            f"services: stopped ({len(started)} processes exited in {time.monotonic() - began:.1f} s)", file=sys.stderr
        )


def signal_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def status() -> int:
    state = running()
    for name, alive in state.items():
        print(f"{name:16} {'running' if alive else 'stopped'} (pid {read_pid(name) or '-'})")
    return 0 if all(state.values()) else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    action = parser.parse_args(argv).action
    if os.geteuid() != 0:
        raise SystemExit("services: run as root inside the sandbox (make services-start / services-stop)")
    if action == "start":
        start()
    elif action == "stop":
        stop()
    else:
        return status()
    return 0


if __name__ == "__main__":
    sys.exit(main())
