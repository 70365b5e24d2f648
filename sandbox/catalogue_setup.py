"""Run by the sandbox Rucio's own venv (sandbox/catalogue.py) at every start, once the server listens: the scope and
the storage elements of the sandbox, added (or pointed at their servers' ports again) through the server's REST API
as its root account, as hepvine's development tools set them (``hepvine.devtools.catalogue.set_storage``: read from
this checkout, which needs nothing but the standard library of it); and the test grid user's account, whose X.509
identity is the user certificate's DN. Argument: JSON ``{"scope": NAME, "storage": {RSE: {"port": P, "site":
SITE}}, "x509": {"account": NAME, "dn": DN}}``."""

import json
import sys
from pathlib import Path

from rucio.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflows"))
from hepvine.devtools.catalogue import set_storage  # noqa: E402 (from this checkout, not an installed package)


def main(argv: list[str]) -> int:
    args = json.loads(argv[1])
    client = Client()
    if args["scope"] not in client.list_scopes():
        client.add_scope("root", args["scope"])
    for rse, where in args["storage"].items():
        set_storage(client, rse, where["port"], where["site"])
    account, dn = args["x509"]["account"], args["x509"]["dn"]
    if account not in {a["account"] for a in client.list_accounts()}:
        client.add_account(account, "USER", f"{account}@localhost")
    if dn not in {i["identity"] for i in client.list_identities(account)}:
        client.add_identity(account, dn, "X509", f"{account}@localhost", default=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
