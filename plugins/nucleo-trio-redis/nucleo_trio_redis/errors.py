"""What a job sees when a shared account cannot answer: Redis is out of reach."""

from __future__ import annotations

from nucleo_trio._redact import redact_text, redact_url
from nucleo_trio.errors import ExternalServiceError

__all__ = ["RedisUnavailableError"]


class RedisUnavailableError(ExternalServiceError):
    """A shared account refused a grant because the Redis that holds it cannot be reached.

    Raised by the account's ``fits`` and ``try_take`` while the connection is lost and the
    account's ``on_redis_lost`` is ``"refuse"``, so admission refuses the waiting job with it;
    the message names the account and the Redis address. ``account`` and ``url`` say the same
    for code.
    """

    def __init__(self, account: str, url: str, reason: str) -> None:
        """``account`` is the shared account's name, ``url`` the Redis it lives on, ``reason``
        what went wrong on the connection; both are shown with their credentials masked."""
        url, reason = redact_url(url), redact_text(reason)
        self.account = account
        """The name of the shared account that refused."""
        self.url = url
        """The Redis URL the account lives on, its password masked."""
        super().__init__(
            f"shared account {account!r}: Redis at {url} is unreachable ({reason}); "
            "it grants nothing until Redis answers again (on_redis_lost='refuse')",
            service="redis",
        )
