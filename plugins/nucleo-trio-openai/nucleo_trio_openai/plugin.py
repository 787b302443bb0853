"""The entry point: registers the ``"openai"`` model provider kind."""

from __future__ import annotations

from collections.abc import Mapping

from nucleo_trio.plugins import ModelProviderFactory, hookimpl

from .provider import openai_provider

__all__ = ["nucleo_trio_model_provider_kinds"]


@hookimpl
def nucleo_trio_model_provider_kinds() -> Mapping[str, ModelProviderFactory]:
    """Provide ``"openai"``: the official SDK behind admission (see
    :func:`~nucleo_trio_openai.openai_provider` for its settings)."""
    return {"openai": openai_provider}
