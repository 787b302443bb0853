"""Provider artifacts for a dispatcher's models: who calls an entry of a provider key.

A :class:`~nucleo_trio.models.Provider` builds the client of an entry; register one per provider
key on ``dispatcher.models.providers`` (or the :class:`~nucleo_trio.models.Providers` handed to a
:class:`~nucleo_trio.models.ModelRuntime`). Two are ready-made:

* :func:`openai_compatible` calls any OpenAI-compatible endpoint: every entry of its key gets an
  :class:`~nucleo_trio.llm.clients.openai.OpenAICompatibleClient` for its wire id, all over one
  connection pool sized like the dispatcher's ``http`` gate, so an admitted job always finds a
  connection; the pool is closed when the dispatcher stops;
* :func:`scripted` answers from :class:`~nucleo_trio.llm.ScriptedLLMClient` scripts, for tests
  and the demo.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import httpx

from ..http import HttpSettings, open_http_client
from ..models.picker import Provider
from .clients import LLMRequest, LLMResponse, ScriptedLLMClient
from .clients.openai import OpenAICompatibleClient, OpenAICompatibleEmbeddingsClient

if TYPE_CHECKING:
    from ..models.catalog import ModelSpec

__all__ = ["openai_compatible", "scripted"]


def openai_compatible(
    key: str,
    base_url: str,
    *,
    api_key: str | None = None,
    credential: str | None = None,
    http_settings: HttpSettings | None = None,
) -> Provider:
    """A provider for the OpenAI-compatible endpoint ``base_url``, under the provider ``key``.

    ``credential`` names the environment variable the entries need to be callable (the key is
    read from it at the first call when ``api_key`` is not given); ``http_settings`` sizes the
    shared pool (size it to the dispatcher's ``http_connections``).
    """
    settings = http_settings or HttpSettings()
    pool: list[httpx.AsyncClient] = []

    def shared() -> httpx.AsyncClient:
        if not pool:
            pool.append(open_http_client(settings))
        return pool[0]

    def secret() -> str | None:
        if api_key is not None or credential is None:
            return api_key
        import os

        return os.environ.get(credential) or None

    def llm(spec: ModelSpec) -> OpenAICompatibleClient:
        return OpenAICompatibleClient(
            base_url, api_key=secret(), model=spec.wire_model_id, http_client=shared()
        )

    def embeddings(spec: ModelSpec) -> OpenAICompatibleEmbeddingsClient:
        return OpenAICompatibleEmbeddingsClient(
            base_url, api_key=secret(), model=spec.wire_model_id, http_client=shared()
        )

    async def close() -> None:
        while pool:
            await pool.pop().aclose()

    return Provider(key, credential=credential, llm=llm, embeddings=embeddings, close=close)


def scripted(
    key: str,
    clients: Mapping[str, ScriptedLLMClient] | None = None,
    *,
    responder: Callable[[LLMRequest], LLMResponse | BaseException] | None = None,
    credential: str | None = None,
) -> Provider:
    """A provider whose entries answer from scripts: ``clients`` by entry id, and for any other
    entry a :class:`ScriptedLLMClient` playing ``responder``."""
    built: dict[str, ScriptedLLMClient] = dict(clients or {})

    def llm(spec: ModelSpec) -> ScriptedLLMClient:
        client = built.get(spec.id)
        if client is None:
            client = built[spec.id] = ScriptedLLMClient(
                responder=responder, model=spec.wire_model_id
            )
        return client

    return Provider(key, credential=credential, llm=llm)
