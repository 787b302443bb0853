"""Anthropic's Messages API for nucleo_trio, over the official ``anthropic`` SDK.

:class:`AnthropicClient` is an :class:`~nucleo_trio.llm.clients.LLMClient` (tool use,
streaming, usage with the prompt cache's counts) whose SDK never retries behind admission's
back; :func:`anthropic_provider` builds the provider of a catalog provider key. Installed, the
distribution is found through its entry point in the ``nucleo_trio`` group, and a dispatcher
configuration can name the kind::

    [model_providers.anthropic]
    kind = "anthropic"
    settings = { credential = "ANTHROPIC_API_KEY", http_settings = { pool_size = 50 } }

The provider can also be registered by hand:
``dispatcher.models.providers.register(anthropic_provider("anthropic"))``.

The SDK is imported when the client is first used, not when the entry point loads: a process
that opens a dispatcher and never calls Anthropic does not pay for the import.
"""

from __future__ import annotations

import logging as _logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from nucleo_trio._lazy import lazy_exports
from nucleo_trio.plugins import ModelProviderFactory, hookimpl
from nucleo_trio_anthropic.provider import (
    DEFAULT_CREDENTIAL as DEFAULT_CREDENTIAL,
    anthropic_provider as anthropic_provider,
)

if TYPE_CHECKING:
    from nucleo_trio_anthropic.client import (
        SERVICE as SERVICE,
        AnthropicClient as AnthropicClient,
        open_sdk_client as open_sdk_client,
    )

__all__ = [
    "DEFAULT_CREDENTIAL",
    "SERVICE",
    "AnthropicClient",
    "anthropic_provider",
    "nucleo_trio_model_provider_kinds",
    "open_sdk_client",
]


@hookimpl
def nucleo_trio_model_provider_kinds() -> Mapping[str, ModelProviderFactory]:
    """Provide the ``"anthropic"`` kind (see :func:`anthropic_provider`)."""
    return {"anthropic": anthropic_provider}


__getattr__ = lazy_exports(
    __name__,
    {"SERVICE": ".client", "AnthropicClient": ".client", "open_sdk_client": ".client"},
)

# The plugin is quiet unless the program configures logging (a library's NullHandler).
_logging.getLogger("nucleo_trio_anthropic").addHandler(_logging.NullHandler())
