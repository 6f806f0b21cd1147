"""Who is calling: bearer tokens (stored only as SHA-256; a tenant's found by its digest, the admin and
metrics tokens compared in constant time), plus the admin credential for operator views and the metrics
credential for scrapes over TCP (metrics tokens or the admin token). (grpcio does not expose SO_PEERCRED of a Unix peer, so
the socket's file mode and the token are the gate; no peer-uid identity.)"""
import hashlib
import hmac

from rtd.daemon.config import Config, TenantConfig
from rtd.errors import Code, RtdError

MAX_TOKEN = 512


def bearer(metadata) -> str | None:
    """The token from `authorization: Bearer <token>` gRPC metadata, if any."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            token = value[len("Bearer "):].strip()
            return token if 0 < len(token) <= MAX_TOKEN else None
    return None


def _digest(token: str | None) -> str | None:
    return None if token is None else hashlib.sha256(token.encode()).hexdigest()


def _matches(digest: str | None, hashes) -> bool:
    if digest is None:
        return False
    found = False
    for h in hashes:  # no early exit: the time taken does not say which hash matched
        found |= hmac.compare_digest(digest, h)
    return found


class Tenants:
    """The tenant table of one config."""

    def __init__(self, config: Config):
        self.by_id = {t.id: t for t in config.tenants}
        # a token's tenant by the token's digest, whatever the number of tenants: a lookup's timing can only
        # tell things about SHA-256 digests of what the caller sent, never about a token it does not have
        self.by_digest = {digest: t for t in config.tenants for digest in t.token_sha256}
        self.anonymous = next((t for t in config.tenants if t.unsafe_anonymous), None)
        self.admin_hashes = config.admin_token_sha256
        self.metrics_hashes = config.metrics_token_sha256 + config.admin_token_sha256

    def authenticate(self, metadata) -> TenantConfig:
        digest = _digest(bearer(metadata))
        if digest is None and self.anonymous is not None:
            return self.anonymous
        if digest is None:
            raise RtdError(Code.E_UNAUTHENTICATED, "send authorization: Bearer <token>")
        tenant = self.by_digest.get(digest)
        if tenant is None:
            raise RtdError(Code.E_UNAUTHENTICATED, "unknown token")
        return tenant

    def authenticate_admin(self, metadata) -> None:
        if not _matches(_digest(bearer(metadata)), self.admin_hashes):
            raise RtdError(Code.E_UNAUTHENTICATED, "admin views need the admin token")

    def authenticate_metrics(self, metadata) -> None:
        if not _matches(_digest(bearer(metadata)), self.metrics_hashes):
            raise RtdError(Code.E_UNAUTHENTICATED, "metrics over TCP need a metrics token or the admin token")

