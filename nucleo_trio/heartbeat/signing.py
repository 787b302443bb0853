"""The key a durable heartbeat store signs its rows with, and where a dispatcher finds it.

A durable store keeps the schedule where something other than this process can write: a file,
a Redis. Each row names a user and a sealed scope guard, and a fire runs under them, so a row
written or edited outside the runtime would run a job as anyone. The runtime therefore signs
every row it writes with an HMAC-SHA256 under a :class:`SigningKey` and refuses, at the fire, a
row whose signature does not match. The key comes from the dispatcher's configuration
(``heartbeat.signing_key_env``, the name of an environment variable that holds it, or
``heartbeat.signing_key`` inline); every worker sharing one store holds the same key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, NoReturn, final

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..dispatch.config import HeartbeatConfig

__all__ = ["MIN_KEY_BYTES", "SigningKey", "signing_key_from"]

MIN_KEY_BYTES: Final = 16
"""The shortest key accepted, in bytes; 32 random bytes (``secrets.token_urlsafe(32)``) is the
advice."""

_SCHEME: Final = "v1"


@final
class SigningKey:
    """A secret that signs heartbeat rows (HMAC-SHA256) and checks their signatures.

    ``secret`` is text (taken as its UTF-8 bytes) or bytes, at least :data:`MIN_KEY_BYTES`
    long. The key never shows itself: its ``repr`` is ``<SigningKey ***>``, and it cannot be
    pickled.
    """

    __slots__ = ("_secret",)

    def __init__(self, secret: str | bytes) -> None:
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if not isinstance(secret, bytes):
            raise TypeError(
                f"a heartbeat signing key is text or bytes, got {type(secret).__name__}"
            )
        if len(secret) < MIN_KEY_BYTES:
            raise ValueError(
                f"a heartbeat signing key needs at least {MIN_KEY_BYTES} bytes, got "
                f"{len(secret)}; make one with python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'"
            )
        self._secret = secret

    def sign(self, payload: bytes) -> str:
        """The signature of ``payload``: ``"v1:"`` and the HMAC-SHA256 in hex."""
        digest = hmac.new(self._secret, payload, hashlib.sha256).hexdigest()
        return f"{_SCHEME}:{digest}"

    def verify(self, payload: bytes, signature: object) -> bool:
        """Whether ``signature`` is this key's signature of ``payload`` (compared in constant
        time); anything that is not a signature string is simply not one."""
        if not isinstance(signature, str):
            return False
        return hmac.compare_digest(self.sign(payload), signature)

    def __repr__(self) -> str:
        return "<SigningKey ***>"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a SigningKey cannot be pickled: give each process the key itself")


def signing_key_from(
    config: HeartbeatConfig, environ: Mapping[str, str] | None = None
) -> SigningKey | None:
    """The key ``config`` names: read from the environment variable ``signing_key_env`` (in
    ``environ``, the process's environment by default) or taken from ``signing_key``; ``None``
    when it names none. A variable that is not set, or a key too short, is a
    :class:`~nucleo_trio.errors.ConfigError` that names the setting, never the key."""
    if config.signing_key_env is not None:
        variables = os.environ if environ is None else environ
        secret = variables.get(config.signing_key_env)
        if secret is None or not secret.strip():
            raise ConfigError(
                f"dispatcher config: heartbeat.signing_key_env names the environment variable "
                f"{config.signing_key_env}, which is not set (or is blank)"
            )
        where = f"the environment variable {config.signing_key_env}"
    elif config.signing_key is not None:
        secret = config.signing_key
        where = "heartbeat.signing_key"
    else:
        return None
    try:
        return SigningKey(secret)
    except ValueError as exc:
        raise ConfigError(f"dispatcher config: {where}: {exc}") from None
