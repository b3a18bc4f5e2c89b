"""A managed-Redis stand-in for redis-py's TLS: Debian's ``redis-server`` (the Valkey binary of
the suite has no TLS) on a TLS port with an ACL user, a throwaway CA made with ``openssl``, and
the limiter deciding over ``rediss://user:password@host`` with the module and with the Lua
twin. A wrong password is an authentication error, not an outage."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Tuple

import pytest
import redis

from conftest import PATIENT, free_port, module_path
from redis_rl import Policy, Source, SyncLimiter

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, valid for a day."""
    (d / "server.ext").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n"
    )
    (d / "client.ext").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n"
    )
    key = ("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out")
    _openssl(d, *key, "ca.key")
    _openssl(d, "req", "-new", "-x509", "-key", "ca.key", "-subj", "/CN=rl test CA", "-days", "1",
             "-sha256", "-extensions", "v3_ca", "-out", "ca.pem")
    for leaf in ("server", "client"):
        _openssl(d, *key, f"{leaf}.key")
        _openssl(d, "req", "-new", "-key", f"{leaf}.key", "-subj", f"/CN=rl test {leaf}", "-out", f"{leaf}.csr")
        _openssl(d, "x509", "-req", "-in", f"{leaf}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-sha256", "-extfile", f"{leaf}.ext", "-out", f"{leaf}.pem")


@pytest.fixture(scope="module", params=[True, False], ids=["module", "twin"])
def tls_server(request) -> Iterator[Tuple[int, Path]]:
    """(TLS port, certificate directory) of a redis-server with the user limiter/secret."""
    d = Path(tempfile.mkdtemp(prefix="rl-py-tls-"))
    make_certs(d)
    proc = None
    try:
        for _ in range(5):
            port, tls_port = free_port(), free_port()
            args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                    "--tls-port", str(tls_port), "--tls-cert-file", str(d / "server.pem"),
                    "--tls-key-file", str(d / "server.key"), "--tls-ca-cert-file", str(d / "ca.pem"),
                    "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(d),
                    "--user", "limiter", "on", ">secret", "~*", "&*", "+@all"]
            if request.param:
                args += ["--loadmodule", module_path()]
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    redis.Redis(port=port).ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.02)
            if proc.poll() is None:
                break
        assert proc is not None and proc.poll() is None, "redis-server with TLS did not start"
        yield tls_port, d
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def test_decides_over_tls_as_an_acl_user(tls_server):
    port, d = tls_server
    url = f"rediss://limiter:secret@127.0.0.1:{port}/0?ssl_ca_certs={d / 'ca.pem'}"
    lim = SyncLimiter(redis.Redis.from_url(url), timeout=PATIENT)
    try:
        key = f"tls:{port}"
        p = Policy.token_bucket(2, 1, 3_600_000)
        got = [lim.check(key, p) for _ in range(3)]
        assert [d.source for d in got] == [Source.REDIS] * 3
        assert [d.allowed for d in got] == [True, True, False]
        assert [d.remaining for d in got[:2]] == [1, 0]
    finally:
        lim.close()


def test_keyword_arguments_and_a_wrong_password(tls_server):
    port, d = tls_server
    client = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(d / "ca.pem"),
                         username="limiter", password="secret")
    assert client.ping()
    wrong = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(d / "ca.pem"),
                        username="limiter", password="wrong")
    with pytest.raises(redis.AuthenticationError):
        wrong.ping()
    # Without the CA, the server's certificate is not trusted.
    untrusted = redis.Redis(host="127.0.0.1", port=port, ssl=True, username="limiter", password="secret")
    with pytest.raises(redis.ConnectionError):
        untrusted.ping()
