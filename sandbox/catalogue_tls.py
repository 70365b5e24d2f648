"""gunicorn's configuration for the sandbox's Rucio (sandbox/catalogue.py passes this file as ``--config``): the TLS
context that a Rucio deployment's Apache and mod_ssl give it. gunicorn's own context (its host certificate, the
test grid's CA, a client certificate asked for but optional: userpass clients present none) that also accepts X.509
proxy certificates (RFC 3820), as mod_ssl does with OPENSSL_ALLOW_PROXY_CERTS. OpenSSL verifies the chain (proxy,
user certificate, CA; expiry, signatures) during the handshake, and a presented chain that fails ends the
connection; catalogue_app.py tells Rucio whom a verified chain names.
"""

import ssl


def ssl_context(conf, default_ssl_context_factory):
    """gunicorn's hook: its own context (certificate, CA, cert_reqs as the command line gives them), proxies allowed,
    and OpenSSL's default checks rather than Python 3.13's strict ones (which refuse a certificate without an
    authority key identifier, as grid proxies are made: mod_ssl does not ask for one either)."""
    context = default_ssl_context_factory()
    context.verify_flags |= ssl.VERIFY_ALLOW_PROXY_CERTS
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
