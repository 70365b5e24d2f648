"""Run by the sandbox Rucio's own venv (sandbox/catalogue.py) once the server listens: the scope and the storage
elements of the sandbox, added through the server's REST API as its root account. Argument: JSON
``{"scope": NAME, "storage": {RSE: {"port": P, "site": SITE}}}``."""

import json
import sys

from rucio.client import Client

# Rucio's XRootD protocol, readable and writable from anywhere: every reader of the sandbox is on loopback.
DOMAINS = {
    "lan": {"read": 1, "write": 1, "delete": 1},
    "wan": {"read": 1, "write": 1, "delete": 1, "third_party_copy_read": 1, "third_party_copy_write": 1},
}


def main(argv: list[str]) -> int:
    args = json.loads(argv[1])
    client = Client()
    client.add_scope("root", args["scope"])
    for rse, where in args["storage"].items():
        # Not deterministic: each replica is registered with its own URL (its path on that server).
        client.add_rse(rse, deterministic=False)
        client.add_protocol(
            rse,
            {
                "scheme": "root",
                "hostname": "127.0.0.1",
                "port": where["port"],
                "prefix": "/",
                "impl": "rucio.rse.protocols.xrootd.Default",
                "domains": DOMAINS,
            },
        )
        client.add_rse_attribute(rse, "site", where["site"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
