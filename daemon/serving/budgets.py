"""What a tenant may make the supervisor hold, and the supervisor as a whole: one Ledger of
per-tenant and supervisor-wide budgets, charged by every front and by the Supervisor API.

Each resource has a per-tenant limit and a supervisor-wide limit. A charge past either is
refused at once with E_BUDGET_EXCEEDED (RESOURCE_EXHAUSTED) naming the resource; nothing
waits. A slice of each limit (`RESERVE`) is kept for control calls — the operator's status,
a tenant's own unload, index and metadata — so those keep working when the expensive calls
(inference, loads) have spent a budget. Charges are objects released exactly once, so every
path that ends a request (answered, failed, reset by the client, connection gone) can
release what it holds without double counting.
"""
import dataclasses
import threading

from rtd.errors import Code, RtdError

OPERATOR = "(operator)"   # who the admin token's calls are charged to
RESERVE = 8               # 1/RESERVE of every limit is kept for control calls
RESOURCES = {
    "requests": "inference and load requests waiting, running or being delivered",
    "request_bytes": "request bytes received and not yet handed on",
    "response_bytes": "response bytes built and not yet delivered",
    "streams": "open HTTP/2 streams and REST requests in hand",
    "connections": "connections that have carried the tenant's calls",
    "package_bytes": "sealed package bytes held for the tenant's models",
    "disk_bytes": "state-directory bytes of the tenant's packages",
}


@dataclasses.dataclass
class _Account:
    limit: int
    used: int = 0
    refused: int = 0

    @property
    def room(self) -> int:
        """What calls other than control calls may hold: the limit less its reserve."""
        return self.limit - self.limit // RESERVE


class Charge:
    """An amount of one resource held by one payer; `release()` is idempotent."""

    __slots__ = ("ledger", "who", "resource", "amount")

    def __init__(self, ledger: "Ledger", who: str, resource: str, amount: int):
        self.ledger, self.who, self.resource, self.amount = ledger, who, resource, amount

    def release(self) -> None:
        if self.amount:
            self.ledger._give_back(self.who, self.resource, self.amount)
            self.amount = 0

    def split(self, amount: int) -> "Charge":
        """Up to `amount` of this charge as a charge of its own: nothing is taken anew (so one
        thing is never charged twice, e.g. an upload's spool and the package read from it)."""
        amount = min(amount, self.amount)
        self.amount -= amount
        return Charge(self.ledger, self.who, self.resource, amount)

    def merge(self, other: "Charge") -> "Charge":
        """This charge, holding `other`'s amount too (of the same payer and resource)."""
        self.amount, other.amount = self.amount + other.amount, 0
        return self

    def __enter__(self) -> "Charge":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Ledger:
    """Budgets of every tenant and of the supervisor. `per_tenant` and `total` map each
    resource name to its limit; tenants may be added later (SIGHUP)."""

    def __init__(self, per_tenant: dict, total: dict, tenants=(), on_refusal=None):
        unknown = (set(per_tenant) | set(total)) - set(RESOURCES)
        if unknown:
            raise ValueError(f"unknown budget resources {sorted(unknown)}")
        self.per_tenant, self.lock = dict(per_tenant), threading.Lock()
        self.total = {r: _Account(total[r]) for r in total}
        self.accounts: dict[str, dict[str, _Account]] = {}
        self.on_refusal = on_refusal or (lambda who, resource: None)
        for tenant in (*tenants, OPERATOR):
            self.add(tenant)

    def add(self, who: str) -> None:
        with self.lock:
            self.accounts.setdefault(who, {r: _Account(limit) for r, limit in self.per_tenant.items()})

    def take(self, who: str, resource: str, amount: int = 1, control: bool = False) -> Charge:
        """Charge `amount` of `resource` to `who`, or refuse; `control` calls may use the reserve."""
        full = control or who == OPERATOR
        with self.lock:
            mine, total = self.accounts[who].get(resource), self.total.get(resource)
            for account in (mine, total):
                if account is not None and account.used + amount > (account.limit if full else account.room):
                    account.refused += 1
                    scope = "the supervisor" if account is total else f"tenant {who}"
                    refusal = RtdError(Code.E_BUDGET_EXCEEDED, f"{resource}: {scope} holds {account.used} of "
                                                               f"{account.limit if full else account.room} "
                                                               f"({RESOURCES[resource]}), {amount} more asked")
                    break
            else:
                if mine is not None:
                    mine.used += amount
                if total is not None:
                    total.used += amount
                return Charge(self, who, resource, amount)
        self.on_refusal(who, resource)
        raise refusal

    def _give_back(self, who: str, resource: str, amount: int) -> None:
        with self.lock:
            mine, total = self.accounts[who].get(resource), self.total.get(resource)
            if mine is not None:
                mine.used -= amount
            if total is not None:
                total.used -= amount

    def usage(self, who: str | None = None) -> dict:
        """{resource: {"used", "limit", "refused"}} of one payer, or of the supervisor as a whole."""
        with self.lock:
            accounts = self.total if who is None else self.accounts.get(who, {})
            return {r: {"used": a.used, "limit": a.limit, "refused": a.refused} for r, a in accounts.items()}
