"""The sandbox Rucio's HTTPS, as a Rucio deployment's Apache and mod_ssl give it (sandbox/catalogue.py serves it with
gunicorn, ``--config python:catalogue_tls``, this directory on its Python path):

- ``ssl_context``: gunicorn's TLS context (its host certificate, the test grid's CA, a client certificate asked for
  but optional: userpass clients present none) that also accepts X.509 proxy certificates (RFC 3820), as mod_ssl
  does with OPENSSL_ALLOW_PROXY_CERTS: OpenSSL, not this module, verifies the chain (proxy, user certificate, CA;
  expiry, signatures) during the handshake, and a presented chain that fails ends the connection;
- ``application``: Rucio's own REST application, told the verified client's subject in ``SSL_CLIENT_S_DN`` in the
  legacy ``/DC=.../CN=...`` form (mod_ssl's ``SSLOptions +StdEnvVars +LegacyDNStringFormat``), which Rucio's x509
  authentication maps to an account (after stripping the proxy's own CN).
"""

import ssl

# What OpenSSL's long attribute names are in a DN string.
SHORT = {
    "domainComponent": "DC",
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
}


def ssl_context(conf, default_ssl_context_factory):
    """gunicorn's hook: its own context (certificate, CA, cert_reqs as the command line gives them), proxies allowed,
    and OpenSSL's default checks rather than Python 3.13's strict ones (which refuse a certificate without an
    authority key identifier, as grid proxies are made: mod_ssl does not ask for one either)."""
    context = default_ssl_context_factory()
    context.verify_flags |= ssl.VERIFY_ALLOW_PROXY_CERTS
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def legacy_dn(subject) -> str:
    """SUBJECT (``SSLSocket.getpeercert()``'s: a tuple of RDNs of (name, value) pairs) as ``/DC=org/.../CN=...``."""
    return "".join(f"/{SHORT.get(name, name)}={value}" for rdn in subject for name, value in rdn)


def application(environ, start_response):
    """Rucio's application, with SSL_CLIENT_S_DN set when the client presented a certificate the handshake verified
    (``getpeercert()`` is empty otherwise)."""
    from rucio.web.rest.flaskapi.v1.main import application as rucio  # in the worker, not in gunicorn's arbiter

    environ.pop("SSL_CLIENT_S_DN", None)
    sock = environ.get("gunicorn.socket")
    peer = sock.getpeercert() if isinstance(sock, ssl.SSLSocket) else None
    if peer:
        environ["SSL_CLIENT_S_DN"] = legacy_dn(peer["subject"])
    return rucio(environ, start_response)
