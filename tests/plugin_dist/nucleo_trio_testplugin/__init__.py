"""A third-party nucleo_trio plugin, as small as one can be: the ``fixed_slots`` limiter kind.

It lives in its own distribution (``nucleo-trio-testplugin``) and is found only through its
entry point in the ``nucleo_trio`` group, so loading it proves the path a published plugin
takes. A fixed-slots account is a concurrency cap, which the seed says is "a subclass with a
name": a :class:`~nucleo_trio.admission.CountingGate` whose permits are called slots.
"""

from __future__ import annotations

from collections.abc import Mapping

from nucleo_trio.admission import CountingGate
from nucleo_trio.plugins import LimiterFactory, hookimpl

__all__ = ["DEFAULT_SLOTS", "FixedSlots", "nucleo_trio_limiter_kinds"]

DEFAULT_SLOTS = 2
"""How many slots a ``fixed_slots`` account has when its settings do not say."""


class FixedSlots(CountingGate):
    """A counting gate named ``slots:<name>`` with ``slots`` permits (category ``semaphore``).

    It is RELEASE like every counting gate: a slot comes back only when the job holding it
    gives it back.
    """

    def __init__(self, name: str, slots: int = DEFAULT_SLOTS) -> None:
        super().__init__(f"slots:{name}", slots)


@hookimpl
def nucleo_trio_limiter_kinds() -> Mapping[str, LimiterFactory]:
    """Provide the ``fixed_slots`` kind: ``registry.create("fixed_slots", name, slots=n)``."""
    return {"fixed_slots": FixedSlots}
