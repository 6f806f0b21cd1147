"""The optional TCP listener: mutual TLS only. A client without a certificate signed by
the configured client CA cannot even reach the token check; with one, tenants work as on
the Unix socket. Also grpc.health.v1 reports SERVING."""
import datetime

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rtd.cli.client import Client
from rtd.errors import RtdError
from tests.daemon.conftest import free_port, mlp


def _cert(name: str, issuer_key=None, issuer_name=None, ca=False, san=None):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name or subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return key, cert, cert.public_bytes(serialization.Encoding.PEM), pem_key


@pytest.fixture
def tls_daemon(fresh_daemon, tmp_path):
    ca_key, ca, ca_pem, _ = _cert("rtd test CA", ca=True)
    _, _, server_pem, server_key = _cert("localhost", ca_key, ca.subject, san="localhost")
    _, _, client_pem, client_key = _cert("tenant client", ca_key, ca.subject)
    _, _, rogue_pem, rogue_key = _cert("self-signed client")
    for name, data in (("ca.pem", ca_pem), ("server.pem", server_pem), ("server.key", server_key)):
        (tmp_path / name).write_bytes(data)
    port = free_port()
    listen = (f'[listen]\ntcp = "127.0.0.1:{port}"\ntls_cert = "{tmp_path / "server.pem"}"\n'
              f'tls_key = "{tmp_path / "server.key"}"\ntls_client_ca = "{tmp_path / "ca.pem"}"\n')
    d = fresh_daemon(listen=listen)
    options = (("grpc.ssl_target_name_override", "localhost"),)

    def channel_creds(cert, key):
        return grpc.ssl_channel_credentials(ca_pem, key, cert)
    return d, f"127.0.0.1:{port}", channel_creds(client_pem, client_key), channel_creds(rogue_pem, rogue_key), options


def test_mtls_listener_serves_tenants_and_refuses_other_clients(tls_daemon):
    d, target, good, rogue, options = tls_daemon
    d.client("acme").load("m", d.package("acme", mlp(1), "m"))
    ok = grpc.secure_channel(target, good, options)
    health = health_pb2_grpc.HealthStub(ok).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    ok.close()
    client = Client(target, d.tokens["acme"], good, options=options)
    y = client.infer("m", {"X": np.ones((1, 4), np.float32)})["Y"]
    assert y.shape == (1, 3)
    with pytest.raises(RtdError) as e:
        Client(target, d.tokens["acme"], rogue, options=options).infer("m", {"X": np.ones((1, 4), np.float32)}, timeout=10)
    assert "UNAVAILABLE" in e.value.detail
    with pytest.raises(RtdError):
        Client(target, d.tokens["acme"], None).infer("m", {"X": np.ones((1, 4), np.float32)}, timeout=10)
