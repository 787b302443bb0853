"""What programs and plugins built on nucleo_trio test with.

* :class:`AccountContract` (``contracts``): the account contract as a base test class; a
  plugin's account subclasses it and passes every check a built-in account passes.
* :class:`DBProviderContract` (``db_contract``): the database provider contract the same way,
  run on a real database the plugin's test owns.
* :class:`HeartbeatStoreContract` (``heartbeat_contract``): the heartbeat store contract, for a
  store that keeps the schedule somewhere of its own (shared by several workers or not).
* :class:`GuardrailContract` (``guardrail_contract``): what a guard of any of the four kinds
  must do for the dispatcher to enforce it, from samples it passes and samples it refuses.
* :class:`EventRecorder`, :func:`settle` and :class:`ScriptedLLMFactory` (``helpers``): keep
  what the bus delivers, let every task run until all are blocked, build scripted LLM clients.
* ``nucleo_trio.testing.pytest_plugin``: the fixtures (``nucleo_dispatcher``, ``nucleo_events``,
  ``scripted_llm``). It is not imported here, so this package needs no pytest; enable it with
  ``pytest_plugins = ["nucleo_trio.testing.pytest_plugin"]`` in your top-level conftest.
"""

from .contracts import AccountContract as AccountContract
from .db_contract import DBProviderContract as DBProviderContract
from .guardrail_contract import GuardrailContract as GuardrailContract
from .heartbeat_contract import HeartbeatStoreContract as HeartbeatStoreContract
from .helpers import (
    DEFAULT_SEED as DEFAULT_SEED,
    EventRecorder as EventRecorder,
    ScriptedLLMFactory as ScriptedLLMFactory,
    settle as settle,
)

__all__ = [
    "DEFAULT_SEED",
    "AccountContract",
    "DBProviderContract",
    "EventRecorder",
    "GuardrailContract",
    "HeartbeatStoreContract",
    "ScriptedLLMFactory",
    "settle",
]

# Report the public names under the path users import them from.
for _public in (
    AccountContract,
    DBProviderContract,
    EventRecorder,
    GuardrailContract,
    HeartbeatStoreContract,
    ScriptedLLMFactory,
):
    _public.__module__ = __name__
del _public
