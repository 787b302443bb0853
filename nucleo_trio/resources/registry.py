"""The providers a dispatcher knows, by name. One registry per dispatcher: two dispatchers in
one process share no provider unless both are handed it."""

from __future__ import annotations

from typing import TypeVar

from .provider import CountingDBResourceProvider, DBResourceProvider

__all__ = ["DBResourceProviders"]

P = TypeVar("P")


class DBResourceProviders:
    """Providers by name. Registering the same instance twice is a no-op; another provider
    under a taken name is refused, and the first stays."""

    def __init__(self) -> None:
        self._by_name: dict[str, DBResourceProvider] = {}

    def register(self, provider: DBResourceProvider) -> None:
        """Add ``provider`` under its ``name``. The same instance again does nothing; another
        provider under a taken name raises :class:`RuntimeError` naming both, and the first
        stays."""
        name = provider.name
        present = self._by_name.get(name)
        if present is provider:
            return
        if present is not None:
            raise RuntimeError(
                f"a database provider named {name!r} is already registered ({present!r}); "
                f"refusing {provider!r}"
            )
        self._by_name[name] = provider

    def unregister(self, provider: DBResourceProvider) -> None:
        """Remove ``provider`` only if that exact instance is registered."""
        if self._by_name.get(provider.name) is provider:
            del self._by_name[provider.name]

    def get(self, name: str, kind: type[P]) -> P:
        """The provider named ``name``, which must be a ``kind``: a missing name raises
        :class:`RuntimeError` as :meth:`provider` does, and so does a provider of another type
        (naming both types)."""
        provider = self.provider(name)
        if not isinstance(provider, kind):
            raise RuntimeError(
                f"the database provider {name!r} is a {type(provider).__qualname__}, "
                f"not the {kind.__qualname__} the caller declared"
            )
        return provider

    def provider(self, name: str) -> DBResourceProvider:
        """The provider named ``name``, whatever its type; a missing name raises
        :class:`RuntimeError` naming it and the registered names."""
        provider = self._by_name.get(name)
        if provider is None:
            raise RuntimeError(
                f"no database provider named {name!r}; registered: {', '.join(self.names()) or 'none'}"
            )
        return provider

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._by_name)

    def register_default(
        self, max_concurrent: int | None, name: str = "default"
    ) -> CountingDBResourceProvider | None:
        """A counting provider from settings; nothing without a bound (the size is never
        guessed from a pool)."""
        if max_concurrent is None:
            return None
        provider = CountingDBResourceProvider(name, max_concurrent)
        self.register(provider)
        return provider
