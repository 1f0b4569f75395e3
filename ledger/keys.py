"""API keys for agents: made once, stored as a SHA-256, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from django.conf import settings
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.http import HttpRequest

from ledger.errors import Forbidden, InvalidInput, NotFound
from ledger.models import ApiKey
from ledger.selectors import cluster_exists
from ledger.validation import text_check, text_problem

KEY_PREFIX = "zsk"
NAME_MAX = 100


@dataclass(frozen=True, slots=True)
class ApiKeyIdentity:
    """Who is calling: the key's name and the cluster it is limited to, if any."""

    id: int
    name: str
    cluster_id: str | None
    # The key's public, random part: names it in counters that outlive a database (rate limits).
    prefix: str = ""

    def may_access(self, cluster_id: str) -> bool:
        return self.cluster_id is None or self.cluster_id == cluster_id


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def api_key_create(*, name: str, cluster_id: str | None = None) -> tuple[ApiKeyIdentity, str]:
    """Make a key; the plain key is returned once and never stored."""
    if not name.strip() or len(name.strip()) > NAME_MAX:
        raise InvalidInput(
            f"a key needs a name of 1-{NAME_MAX} characters", details={"field": "name"}
        )
    text_check(name, field="name")
    if cluster_id is not None and not cluster_exists(cluster_id=cluster_id):
        raise NotFound(f"cluster {cluster_id!r} does not exist", details={"cluster_id": cluster_id})
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    plain = f"{KEY_PREFIX}_{prefix}_{secret}"
    key = ApiKey.objects.create(
        name=name.strip(), prefix=prefix, key_hash=_digest(plain), cluster_id=cluster_id
    )
    identity = ApiKeyIdentity(
        id=key.pk, name=key.name, cluster_id=key.cluster_id, prefix=key.prefix
    )
    return identity, plain


def api_key_authenticate(*, plain: str) -> ApiKeyIdentity | None:
    """The identity behind a presented key, or ``None``.

    A key found in the database is trusted for ``API_KEY_CACHE_SECONDS`` without asking again
    (one indexed query per key and period, not per request): a key deleted in another process
    stops working within that time, one deleted in this process at once.
    """
    parts = plain.split("_", 2)
    # A prefix that could never have been stored is no key, and must not reach the database.
    if len(parts) != 3 or parts[0] != KEY_PREFIX or text_problem(parts[1]) is not None:
        return None
    digest = _digest(plain)
    now = time.monotonic()
    if (known := _verified.get(digest)) is not None and known[0] > now:
        return known[1]
    key = ApiKey.objects.filter(prefix=parts[1]).first()
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        return None
    identity = ApiKeyIdentity(
        id=key.pk, name=key.name, cluster_id=key.cluster_id, prefix=key.prefix
    )
    if len(_verified) >= _VERIFIED_MAX:
        _verified.clear()
    _verified[digest] = (now + settings.API_KEY_CACHE_SECONDS, identity)
    return identity


def api_key_known(*, plain: str) -> ApiKeyIdentity | None:
    """The identity behind a key verified within ``API_KEY_CACHE_SECONDS``, without asking the
    database (None: not verified lately; ``api_key_authenticate`` then decides). For callers
    on an event loop, which must not block on a query."""
    known = _verified.get(_digest(plain))
    return known[1] if known is not None and known[0] > time.monotonic() else None


# Keys verified lately, by digest: (trusted until, on the monotonic clock; identity).
_verified: dict[str, tuple[float, ApiKeyIdentity]] = {}
_VERIFIED_MAX = 10_000


@receiver(post_delete, sender=ApiKey)
def _forget_deleted_key(sender: type[ApiKey], instance: ApiKey, **kwargs: object) -> None:
    _verified.pop(instance.key_hash, None)


def require_cluster(request: HttpRequest, cluster_id: str) -> None:
    """Refuse a key limited to another cluster (403)."""
    identity = getattr(request, "auth", None)
    if isinstance(identity, ApiKeyIdentity) and not identity.may_access(cluster_id):
        raise Forbidden(
            f"this API key is limited to cluster {identity.cluster_id!r}",
            details={"cluster_id": cluster_id},
        )


def scoped_cluster(request: HttpRequest) -> str | None:
    """The cluster a request's key is limited to, or ``None`` (an unscoped key or a session)."""
    identity = getattr(request, "auth", None)
    return identity.cluster_id if isinstance(identity, ApiKeyIdentity) else None
