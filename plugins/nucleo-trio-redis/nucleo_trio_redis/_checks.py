"""Checks of configuration values: each refuses a bad one naming the owner, the setting and it."""

from __future__ import annotations

import math
from urllib.parse import urlsplit

from nucleo_trio._redact import redact_url

__all__ = [
    "check_name",
    "check_positive_int",
    "check_seconds",
    "check_share",
    "check_url",
    "redact",
]

_SCHEMES = ("redis", "rediss", "unix")


def check_name(owner: str, setting: str, value: object) -> str:
    """A non-blank str without the characters the key layout and the script use as separators."""
    if not isinstance(value, str):
        raise TypeError(f"{owner}: {setting} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{owner}: {setting} must not be blank")
    bad = sorted({char for char in value if char in "{},:" or char.isspace()})
    if bad:
        raise ValueError(
            f"{owner}: {setting} {value!r} holds {''.join(bad)!r}; names may not hold braces, "
            "commas, colons or whitespace (they separate the parts of Redis keys)"
        )
    return value


def check_positive_int(owner: str, setting: str, value: object) -> int:
    """A positive int (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{owner}: {setting} must be an int, got {value!r} ({type(value).__name__})"
        )
    if value <= 0:
        raise ValueError(f"{owner}: {setting} must be positive, got {value}")
    return value


def check_seconds(owner: str, setting: str, value: object, *, minimum: float = 0.0) -> float:
    """A finite number of seconds above ``minimum`` (not NaN, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{owner}: {setting} must be a number of seconds, got {value!r} "
            f"({type(value).__name__})"
        )
    if not math.isfinite(value) or value <= minimum:
        raise ValueError(f"{owner}: {setting} must be a finite number > {minimum:g}, got {value!r}")
    return float(value)


def check_share(owner: str, setting: str, value: object) -> float:
    """A fraction in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{owner}: {setting} must be a number, got {value!r} ({type(value).__name__})"
        )
    if not math.isfinite(value) or not 0 < value <= 1:
        raise ValueError(f"{owner}: {setting} must be a fraction in (0, 1], got {value!r}")
    return float(value)


def check_url(owner: str, value: object) -> str:
    """A ``redis://``, ``rediss://`` or ``unix://`` URL with a host (or a socket path)."""
    if not isinstance(value, str):
        raise TypeError(f"{owner}: url must be a str, got {type(value).__name__}")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{owner}: url {redact(value)!r} is not a URL: {exc}") from None
    if parts.scheme not in _SCHEMES:
        raise ValueError(
            f"{owner}: url {redact(value)!r} must start with redis://, rediss:// or unix://"
        )
    if parts.scheme == "unix" and not parts.path:
        raise ValueError(f"{owner}: url {redact(value)!r} names no socket path")
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError(f"{owner}: url {redact(value)!r} names no host")
    if port == 0:
        raise ValueError(f"{owner}: url {redact(value)!r} names port 0")
    return value


def redact(url: str) -> str:
    """``url`` without its credentials (the userinfo's password and any ``?password=``), for
    reprs, messages and status rows: :func:`nucleo_trio._redact.redact_url`."""
    return redact_url(url)
