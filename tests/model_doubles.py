"""Catalogs, providers and dispatchers for the models and LLM tests.

``entry(...)`` writes one catalog entry as plain data with sensible defaults; ``catalog(...)``
builds a :class:`ModelCatalog` from entries and pins; ``providers(...)`` registers providers by
key with an environment the test controls; ``model_dispatcher`` runs a dispatcher whose models
use a given catalog and scripted clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.dispatch.dispatcher import JobDispatcher
from nucleo_trio.llm import ScriptedLLMClient
from nucleo_trio.models import ModelCatalog, ModelRuntime, ModelSpec, Provider, Providers


def entry(spec_id: str, grade: str | None = "SMALL", **fields: Any) -> dict[str, Any]:
    """One entry as plain data: a language model of ``grade`` on provider ``fake-llm``."""
    data: dict[str, Any] = {
        "id": spec_id,
        "provider_key": "fake-llm",
        "max_context_tokens": 100_000,
        "max_output_tokens": 32_000,
        "tpm": 1_000_000,
        "rpm": 1_000,
    }
    if grade is not None:
        data["grade"] = grade
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def catalog(
    *entries: Mapping[str, Any],
    pins: Mapping[str, list[str]] | None = None,
    provider_defaults: Mapping[str, Any] | None = None,
) -> ModelCatalog:
    data: dict[str, Any] = {"models": list(entries)}
    if pins:
        data["pins"] = dict(pins)
    if provider_defaults:
        data["provider_defaults"] = dict(provider_defaults)
    return ModelCatalog.from_mapping(data, source="the test catalog")


def providers(
    *keys: str,
    credentials: Mapping[str, str] | None = None,
    environ: dict[str, str] | None = None,
    clients: Mapping[str, Any] | None = None,
) -> Providers:
    """Providers for ``keys``; ``credentials`` maps a key to the variable it needs.

    ``clients`` maps an entry id to the client its provider hands out (a scripted client that
    answers "ok" for any entry without one).
    """
    found = Providers(environ if environ is not None else {})
    for key in keys:
        credential = (credentials or {}).get(key)

        def build(spec: ModelSpec) -> Any:
            if clients and spec.id in clients:
                return clients[spec.id]
            return ScriptedLLMClient(responder=lambda request: _ok(), model=spec.wire_model_id)

        found.register(Provider(key, credential=credential, llm=build))
    return found


def _ok() -> Any:
    from nucleo_trio.llm import reply

    return reply("ok")


def runtime(
    the_catalog: ModelCatalog, *, keys: Iterable[str] = ("fake-llm",), **kwargs: Any
) -> ModelRuntime:
    return ModelRuntime(the_catalog, providers=providers(*keys, **kwargs))


@asynccontextmanager
async def model_dispatcher(
    models: ModelRuntime, *, seed: int = 7, **kwargs: Any
) -> AsyncIterator[JobDispatcher]:
    async with open_dispatcher(DispatcherConfig(seed=seed), models=models, **kwargs) as d:
        yield d
