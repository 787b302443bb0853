"""The ``"openai"`` model provider kind: every entry of a provider key called through one
``AsyncOpenAI``, closed when the dispatcher stops."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from nucleo_trio.admission.named_gates import DEFAULT_HTTP_POOL_SIZE
from nucleo_trio.http import HttpSettings
from nucleo_trio.models import Provider

if TYPE_CHECKING:
    import openai

    from nucleo_trio.models import ModelSpec

    from .client import OpenAIClient, OpenAIEmbeddingsClient

__all__ = ["DEFAULT_CREDENTIAL", "openai_provider"]

_TIMEOUTS = ("connect_timeout", "read_timeout", "write_timeout", "pool_timeout")

DEFAULT_CREDENTIAL = "OPENAI_API_KEY"
"""The environment variable the provider reads its API key from unless told otherwise."""


def openai_provider(
    key: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    credential: str | None = DEFAULT_CREDENTIAL,
    organization: str | None = None,
    project: str | None = None,
    pool_size: int = DEFAULT_HTTP_POOL_SIZE,
    timeout: float | None = None,
    max_tokens_field: str = "max_tokens",
    headers: Mapping[str, str] | None = None,
) -> Provider:
    """A :class:`~nucleo_trio.models.Provider` for the provider key ``key`` over the official
    SDK: an :class:`OpenAIClient` (and an :class:`OpenAIEmbeddingsClient`) per entry, all
    through one ``AsyncOpenAI`` with its retries off, opened at the first call and closed when
    the dispatcher stops.

    ``credential`` names the environment variable that holds the API key (default
    ``OPENAI_API_KEY``); an entry is callable only while it is set, and the key is read when
    the ``AsyncOpenAI`` opens. ``api_key`` gives the key itself instead (tests, a local server);
    with ``credential=None`` and no ``api_key`` the key is not needed and none is sent.
    ``base_url`` defaults to the SDK's (``OPENAI_BASE_URL``, else OpenAI's API).
    ``pool_size`` sizes the connection pool: give it the dispatcher's ``http_connections``
    (default 1000, the same default). ``timeout``, in seconds, replaces all four of the pool's
    timeouts (connecting, each read, each write, waiting for a connection); ``None``, the
    default, keeps :class:`~nucleo_trio.http.HttpSettings`' (30 s to connect, 15 minutes a read
    or a write, an hour for a connection). ``max_tokens_field`` is where the output budget goes
    (``max_completion_tokens`` for OpenAI's reasoning models).
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"openai_provider needs a non-empty provider key, got {key!r}")
    # Imported here, not at the top: the entry point loads this module in every process that
    # opens a dispatcher, and the SDK takes seconds to import.
    from .client import OpenAIClient, OpenAIEmbeddingsClient, open_async_openai

    waits = {} if timeout is None else dict.fromkeys(_TIMEOUTS, timeout)
    settings = HttpSettings(pool_size=pool_size, **waits)
    opened: list[openai.AsyncOpenAI] = []

    def sdk() -> openai.AsyncOpenAI:
        if not opened:
            secret = api_key
            if secret is None and credential is not None:
                secret = os.environ.get(credential) or None
            opened.append(
                open_async_openai(
                    # The SDK insists on a key; a server that needs none is sent a blank one.
                    api_key=secret if secret is not None or credential is not None else "-",
                    base_url=base_url,
                    organization=organization,
                    project=project,
                    http_settings=settings,
                    headers=headers,
                )
            )
        return opened[0]

    def llm(spec: ModelSpec) -> OpenAIClient:
        return OpenAIClient(sdk(), model=spec.wire_model_id, max_tokens_field=max_tokens_field)

    def embeddings(spec: ModelSpec) -> OpenAIEmbeddingsClient:
        return OpenAIEmbeddingsClient(sdk(), model=spec.wire_model_id)

    async def close() -> None:
        while opened:
            await opened.pop().close()

    return Provider(
        key,
        credential=credential if api_key is None else None,
        llm=llm,
        embeddings=embeddings,
        close=close,
    )
