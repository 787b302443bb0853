"""The plugin module the ``nucleo_trio`` entry point names: the hooks this distribution answers.

The limiter kinds are added here as the shared accounts land; the Redis heartbeat store answers
``nucleo_trio_heartbeat_store`` from this module too.
"""

from __future__ import annotations

__all__: list[str] = []
