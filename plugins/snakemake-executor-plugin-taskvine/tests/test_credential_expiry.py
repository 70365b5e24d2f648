"""Credentials that expire during a run: when a credential file stops being valid, read from
its bytes (credentials.expires_at: an X.509 proxy's chain, a JWT's exp); the dispatcher hands out no task while a
credential has expired (it would be refused by the storage and its files counted as failed), says so once, goes on
as soon as the file is renewed, and stops the run with what to do once nothing runs; a task that failed after the
credential it carried was renewed runs again with the new one. Pure logic with the fake manager of
test_stragglers; a renewal reaching real tasks is test_credential_files.py, and a whole campaign over a server that
checks proxies is the workflow's own business (its test of a GSI-checking XRootD server)."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from test_stragglers import FakeManager, Pipe, result

from snakemake_executor_plugin_taskvine import credentials
from snakemake_executor_plugin_taskvine.dispatcher import Tasks
from snakemake_executor_plugin_taskvine.stragglers import Stragglers
from snakemake_executor_plugin_taskvine.taskvine import TaskSpec

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.timezone.utc)


def certificate(cn: str, not_after: dt.datetime) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name.from_rfc4514_string(f"CN={cn}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_a_proxy_expires_with_the_first_certificate_of_its_chain_to_end():
    proxy_end, user_end = NOW + dt.timedelta(hours=12), NOW + dt.timedelta(days=300)
    pem = certificate("proxy", proxy_end) + b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
    pem += certificate("user", user_end)
    assert credentials.expires_at(pem) == proxy_end.timestamp()
    # After 2049 a certificate's times are GeneralizedTime, not UTCTime.
    late = dt.datetime(2061, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)
    assert credentials.expires_at(certificate("late", late)) == late.timestamp()


def test_a_token_expires_at_its_exp_claim_and_other_files_never_known():
    def part(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    token = f"{part({'alg': 'ES256'})}.{part({'sub': 'u', 'exp': 1_800_000_000})}.c2ln\n".encode()
    assert credentials.expires_at(token) == 1_800_000_000
    assert credentials.expires_at(f"{part({'alg': 'ES256'})}.{part({'sub': 'u'})}.c2ln".encode()) is None
    for other in (b"", b"a password\n", b"a.b.c", b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"):
        assert credentials.expires_at(other) is None


def tasks() -> tuple[Tasks, FakeManager, Pipe]:
    manager, pipe = FakeManager(), Pipe()
    return Tasks(manager, Stragglers(factor=0, min_s=0), pipe, max_tasks=10), manager, pipe


def spec(tag: str) -> TaskSpec:
    return TaskSpec(command="true", tag=tag, category="analyse")


def test_no_task_goes_out_while_a_credential_has_expired_and_all_go_once_renewed():
    t, manager, pipe = tasks()
    for tag in "ab":
        t.submit(spec(tag))
    manager.dispatched_at[1] = time.time()  # a runs on a worker; b is queued in TaskVine
    manager.expired = ["$X509_USER_PROXY (/tmp/x509up_u1) expired at 2026-11-25 12:00:00 UTC"]
    for tag in "cd":
        t.submit(spec(tag))
    assert [s.tag for _, s in manager.submitted] == ["a", "b"]
    assert manager.cancelled == [2]  # b taken back before a worker got it with the expired proxy
    assert [s.tag for s in t.backlog] == ["b", "c", "d"]
    notes = [m for kind, m in pipe.sent if kind == "note"]
    assert len(notes) == 1 and "x509up_u1" in notes[0] and "2 waiting" in notes[0] and "1 running" in notes[0]
    assert not [m for kind, m in pipe.sent if kind == "stop"]  # a task still runs: a renewal may come
    manager.expired = []  # renewed
    t.feed()
    assert [s.tag for _, s in manager.submitted] == ["a", "b", "b", "c", "d"]


def test_the_run_is_stopped_once_nothing_runs_and_the_credential_is_still_expired():
    t, manager, pipe = tasks()
    t.submit(spec("a"))
    manager.dispatched_at[1] = time.time()
    manager.expired = ["$BEARER_TOKEN_FILE (/tmp/bt_u1) expired at 2026-11-25 12:00:00 UTC"]
    t.submit(spec("b"))
    t.finished(result(1, "a"))
    t.feed()
    t.feed()
    stops = [m for kind, m in pipe.sent if kind == "stop"]
    assert len(stops) == 1 and "bt_u1" in stops[0] and "1 job(s) were not run" in stops[0]
    assert "run the same command again" in stops[0]
    assert [s.tag for _, s in manager.submitted] == ["a"]


def test_a_task_that_failed_after_a_renewal_runs_again_and_one_that_did_not_fails():
    t, manager, pipe = tasks()
    for tag in "ab":
        t.submit(spec(tag))
    t.finished(dataclasses.replace(result(1, "a", ok=False), credentials_renewed=True))
    assert [s.tag for _, s in manager.submitted] == ["a", "b"]
    t.feed()
    assert [s.tag for _, s in manager.submitted] == ["a", "b", "a"]  # with the renewed credential
    assert not [m for kind, m in pipe.sent if kind == "result"]
    assert any("runs again" in m for kind, m in pipe.sent if kind == "note")
    t.finished(result(2, "b", ok=False))  # not renewed: its failure is the job's
    assert [m.tag for kind, m in pipe.sent if kind == "result"] == ["b"]
