"""What the sandbox's gunicorn serves as Rucio (sandbox/catalogue.py: ``catalogue_app:application``): Rucio's own
REST application, told the verified client's subject in ``SSL_CLIENT_S_DN`` in the legacy ``/DC=.../CN=...`` form
(mod_ssl's ``SSLOptions +StdEnvVars +LegacyDNStringFormat`` in a Rucio deployment), which Rucio's x509
authentication maps to an account (after stripping the proxy's own CN). The chain was verified in the TLS handshake
(catalogue_tls.py)."""

import ssl

from rucio.web.rest.flaskapi.v1.main import application as rucio

# What OpenSSL's long attribute names are in a DN string.
SHORT = {
    "domainComponent": "DC",
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "userId": "UID",
}


def legacy_dn(subject) -> str:
    """SUBJECT (``SSLSocket.getpeercert()``'s: a tuple of RDNs of (name, value) pairs) as ``/DC=org/.../CN=...``."""
    return "".join(f"/{SHORT.get(name, name)}={value}" for rdn in subject for name, value in rdn)


def application(environ, start_response):
    """Rucio's application, with SSL_CLIENT_S_DN set when the client presented a certificate the handshake verified
    (``getpeercert()`` is empty otherwise)."""
    environ.pop("SSL_CLIENT_S_DN", None)
    sock = environ.get("gunicorn.socket")
    peer = sock.getpeercert() if isinstance(sock, ssl.SSLSocket) else None
    if peer:
        environ["SSL_CLIENT_S_DN"] = legacy_dn(peer["subject"])
    return rucio(environ, start_response)
