"""The module the ``nucleo_trio`` entry point names: the hooks this distribution answers."""

from __future__ import annotations

__all__: list[str] = []
