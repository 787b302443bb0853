"""The framework's own contributions, registered through the same hooks as any plugin.

Registering the built-ins as a plugin (the tox pattern) keeps one path for everything: a
built-in kind and a third-party kind are found, checked for clashes and built the same way,
and a deployment can block this module by name
(``pm.set_blocked("nucleo_trio.plugins.builtin")`` before registration) to replace them.
"""

from __future__ import annotations

from collections.abc import Mapping

from nucleo_trio.admission import CountingGate, ElasticWindow, TokenBucket, TokenBucketConfig
from nucleo_trio.plugins.hookspecs import LimiterFactory, hookimpl

__all__ = ["elastic_window", "nucleo_trio_limiter_kinds", "token_bucket"]


def token_bucket(name: str, *, rpm: int, tpm: int) -> TokenBucket:
    """A :class:`~nucleo_trio.admission.TokenBucket` for the model ``name``: ``rpm`` requests and
    ``tpm`` tokens a minute (``{"kind": "token_bucket", "settings": {"rpm": 600, "tpm": 60000}}``)."""
    return TokenBucket(name, TokenBucketConfig(rpm, tpm))


def elastic_window(name: str, *, max_requests: int, window: float) -> ElasticWindow:
    """An :class:`~nucleo_trio.admission.ElasticWindow` named ``name`` admitting
    ``max_requests`` per ``window`` seconds, with the template's other defaults
    (``{"kind": "elastic_window", "settings": {"max_requests": 100, "window": 60}}``)."""
    template = type(
        "ConfiguredWindow",
        (ElasticWindow,),
        {"base_window": float(window), "max_requests": max_requests},
    )
    window_account: ElasticWindow = template(name)
    return window_account


@hookimpl
def nucleo_trio_limiter_kinds() -> Mapping[str, LimiterFactory]:
    """Provide ``"counting"`` (a :class:`~nucleo_trio.admission.CountingGate` of ``capacity``
    permits), ``"token_bucket"`` (see :func:`token_bucket`) and ``"elastic_window"`` (see
    :func:`elastic_window`)."""
    return {
        "counting": CountingGate,
        "token_bucket": token_bucket,
        "elastic_window": elastic_window,
    }
