"""Every hook a nucleo_trio plugin can implement, as a typed stub with its contract.

nucleo_trio is extended through `pluggy <https://pluggy.readthedocs.io>`_ under the project
name ``nucleo_trio``. A plugin is any module, class or object with functions decorated with
:data:`hookimpl` whose names match a stub below; a third-party distribution makes itself known
by declaring an entry point in the ``nucleo_trio`` group::

    [project.entry-points.nucleo_trio]
    my_limiters = "my_package.nucleo_plugin"

The built-ins use the very same hooks (see :mod:`nucleo_trio.plugins.builtin`), so a plugin's
contributions sit beside the framework's own on equal terms: a third-party account joins
grants, head reservation and rollback exactly like a built-in gate.

Two kinds of hook live here, and each stub says which it is:

* **registration hooks** fan out: every plugin may answer, all answers are gathered, and a name
  claimed by two plugins is refused naming both (limiter kinds; later DB providers, guardrails
  and event observers);
* **provider hooks** pick one thing and are ``firstresult``: the first plugin that answers
  something other than ``None`` wins (later the memory reader and the heartbeat store).

A hook implementation may accept fewer arguments than its stub declares, never more; a
decorated function whose name matches no stub is refused when the plugin manager starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import pluggy

if TYPE_CHECKING:
    from nucleo_trio.admission import RateLimiter

__all__ = [
    "PROJECT_NAME",
    "LimiterFactory",
    "hookimpl",
    "hookspec",
    "nucleo_trio_limiter_kinds",
]

PROJECT_NAME: Final = "nucleo_trio"
"""The pluggy project name, and the entry-point group third-party distributions register in."""

hookspec: Final = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks a stub in this module as a hook specification."""

hookimpl: Final = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's function as the implementation of the hook of the same name."""


class LimiterFactory(Protocol):
    """Builds one account of a limiter kind: ``factory(name, **settings) -> RateLimiter``.

    ``name`` is the account's own name (it shows up in status rows and limiter events);
    ``settings`` are the kind's keyword options, typically read from configuration, such as
    ``capacity`` for a counting gate. A class whose constructor takes the name first is a
    factory as it stands: ``{"counting": CountingGate}``.

    A factory refuses settings it cannot honour by raising; the registry reports that failure
    naming the kind and the plugin that provides it.
    """

    # `*args` is never passed; with `**settings` it makes the signature gradual after `name`,
    # so a class such as `CountingGate(name, capacity)` type-checks as a factory.
    def __call__(self, name: str, /, *args: Any, **settings: Any) -> RateLimiter: ...


# Each stub's body is only its docstring: pluggy reads a specification's name, arguments and
# options but never calls it, hence the `empty-body` ignores.


# --- limiters -----------------------------------------------------------------------------------


@hookspec
def nucleo_trio_limiter_kinds() -> Mapping[str, LimiterFactory]:  # type: ignore[empty-body]
    """Name the limiter kinds this plugin provides (a registration hook: every answer counts).

    Called once per :class:`~nucleo_trio.plugins.LimiterRegistry` built from a plugin manager,
    that is, when the runtime assembles the accounts a configuration names by kind.

    Return a mapping from kind name (a non-empty string such as ``"counting"`` or
    ``"fixed_slots"``) to the :class:`LimiterFactory` that builds one account of that kind.
    The factory must return an object satisfying the
    :class:`~nucleo_trio.admission.RateLimiter` protocol; anything else is refused when the
    account is created, naming the kind and the plugin. A kind already provided by another
    plugin, built-ins included, is refused naming both plugins: kinds are never silently
    shadowed. Returning ``None`` or an empty mapping contributes nothing.
    """
