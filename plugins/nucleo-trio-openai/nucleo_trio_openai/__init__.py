"""The official ``openai`` SDK behind admission: chat completions, tools, streaming and
embeddings through ``AsyncOpenAI``, with the SDK's own retries off.

Installed, the distribution registers the ``"openai"`` model provider kind (its entry point is
:mod:`nucleo_trio_openai.plugin`), so a dispatcher's configuration can name it::

    [model_providers.openai]
    kind = "openai"
    settings = { credential = "OPENAI_API_KEY" }

:func:`openai_provider` builds the same provider in code; :class:`OpenAIClient` and
:class:`OpenAIEmbeddingsClient` are the clients it hands out, usable on their own over an
``AsyncOpenAI`` from :func:`open_async_openai`; :func:`translate` turns the SDK's exceptions
into the runtime's re-run signals and errors.

The SDK is imported when one of these is first used, not when the entry point loads: a process
that opens a dispatcher and never calls OpenAI does not pay for the import.
"""

from typing import TYPE_CHECKING

from nucleo_trio._lazy import lazy_exports

from .provider import DEFAULT_CREDENTIAL as DEFAULT_CREDENTIAL, openai_provider as openai_provider

if TYPE_CHECKING:
    from .client import (
        OpenAIClient as OpenAIClient,
        OpenAIEmbeddingsClient as OpenAIEmbeddingsClient,
        open_async_openai as open_async_openai,
    )
    from .errors import translate as translate

__all__ = [
    "DEFAULT_CREDENTIAL",
    "OpenAIClient",
    "OpenAIEmbeddingsClient",
    "open_async_openai",
    "openai_provider",
    "translate",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "OpenAIClient": ".client",
        "OpenAIEmbeddingsClient": ".client",
        "open_async_openai": ".client",
        "translate": ".errors",
    },
)
