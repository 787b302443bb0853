"""The ``anthropic`` model provider kind: one SDK client per provider key, closed with the
dispatcher."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nucleo_trio.http import HttpSettings
from nucleo_trio.models import Provider

if TYPE_CHECKING:
    import anthropic

    from nucleo_trio.models.catalog import ModelSpec

    from .client import AnthropicClient

__all__ = ["DEFAULT_CREDENTIAL", "anthropic_provider"]

DEFAULT_CREDENTIAL = "ANTHROPIC_API_KEY"
"""The environment variable a provider reads its API key from when it is given none."""

_UNSET: Any = object()


def _settings(value: HttpSettings | Mapping[str, Any] | None) -> HttpSettings:
    if value is None:
        return HttpSettings()
    if isinstance(value, HttpSettings):
        return value
    if isinstance(value, Mapping):
        return HttpSettings.from_mapping(value)
    raise TypeError(
        f"http_settings must be HttpSettings or a mapping of its fields, got {type(value).__name__}"
    )


def anthropic_provider(
    key: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    credential: str | None = _UNSET,
    http_settings: HttpSettings | Mapping[str, Any] | None = None,
) -> Provider:
    """A provider for Anthropic's Messages API under the provider ``key``.

    Every entry of the key gets an :class:`AnthropicClient` for its wire model id, all through
    one ``AsyncAnthropic`` over one connection pool, opened at the first call and closed when
    the dispatcher stops. ``base_url`` is the API's address (``None``: the SDK's default, or
    ``ANTHROPIC_BASE_URL``). ``credential`` names the environment variable that holds the API
    key: the entries are callable only while it is set, and the key is read from it when the
    pool opens. It defaults to ``ANTHROPIC_API_KEY``, or to none when ``api_key`` is given.
    ``http_settings`` sizes and times the pool (an :class:`~nucleo_trio.http.HttpSettings`, or a
    mapping of its fields from configuration); size it to the dispatcher's
    ``http_connections``.

    Raises :class:`~nucleo_trio.errors.ConfigError` for bad HTTP settings.
    """
    settings = _settings(http_settings)
    # Imported here, not at the top: the entry point loads this module in every process that
    # opens a dispatcher, and the SDK takes seconds to import.
    from .client import AnthropicClient, open_sdk_client

    if credential is _UNSET:
        credential = None if api_key is not None else DEFAULT_CREDENTIAL
    opened: list[anthropic.AsyncAnthropic] = []

    def shared() -> anthropic.AsyncAnthropic:
        if not opened:
            secret = api_key
            if secret is None and credential is not None:
                secret = os.environ.get(credential) or None
            opened.append(
                open_sdk_client(api_key=secret, base_url=base_url, http_settings=settings)
            )
        return opened[0]

    def llm(spec: ModelSpec) -> AnthropicClient:
        return AnthropicClient(spec.wire_model_id, client=shared())

    async def close() -> None:
        while opened:
            await opened.pop().close()

    return Provider(key, credential=credential, llm=llm, close=close)
