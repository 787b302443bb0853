"""Guardrails anyone can attach: a payload size cap, PII detection, a principal allow-list, a
caller-class allow-list, a URL guard and an exfiltration-marker guard.

Each is registered by name through the ``nucleo_trio_guardrails`` hook (see
:mod:`nucleo_trio.plugins.builtin`), so a deployment can attach it to a tool class from
configuration as well as a tool declaring it in code.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

import trio

from ..errors import GuardrailError, UncorrectableError
from ..jobs.identity import Identifiable
from .kinds import (
    GUARDRAIL_TIMEOUT,
    AdmissionContext,
    AdmissionGuardrail,
    AuthGuardrail,
    ContentGuardrail,
    Direction,
    to_json,
)

__all__ = [
    "CallerClassAllowListGuardrail",
    "ExfiltrationMarkerGuardrail",
    "PIIDetectionGuardrail",
    "PayloadSizeCapGuardrail",
    "PrincipalAllowListGuardrail",
    "Resolver",
    "UrlGuardrail",
]

log = logging.getLogger("nucleo_trio.guardrails")


class PayloadSizeCapGuardrail(ContentGuardrail):
    """Refuses an input whose JSON is longer than ``max_chars`` characters; no input (``None``)
    passes. ``max_chars`` must be a positive int, or the constructor raises ``ValueError``."""

    # GRD-19

    def __init__(
        self, parent: Identifiable, max_chars: int, *, timeout: float | None = GUARDRAIL_TIMEOUT
    ) -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
            raise ValueError(
                f"PayloadSizeCapGuardrail: max_chars must be a positive int, got {max_chars!r}"
            )
        super().__init__(parent, Direction.INPUT, timeout=timeout)
        self.max_chars = max_chars
        """The longest input allowed, in characters of its JSON (as :func:`to_json` writes it)."""

    async def validate(self, target: Any) -> None:
        if target is None:
            return
        length = len(to_json(target))
        if length > self.max_chars:
            raise GuardrailError(
                f"The input to {self.gated_tool} is {length} characters of JSON, over the cap of "
                f"{self.max_chars}; send a smaller input"
            )


def _luhn(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char)
        if i % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


_SSN = re.compile(r"(?<!\d)\d{3}-\d{2}-\d{4}(?!\d)")
_CARD = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_PHONE = re.compile(r"(?<![\d-])(?:\+?1[ .-]?)?(?:\(\d{3}\)\s?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\d-])")


class PIIDetectionGuardrail(ContentGuardrail):
    """Refuses a result that carries personal data: a US social security number, a payment
    card number (Luhn-checked), an email address or a phone number. It judges the result by
    default; give ``Direction.INPUT`` to judge the input instead. A string target is searched as
    it is, anything else as its JSON.

    One refusal lists every kind found; only that summary, never the content, reaches the
    refusal and the log (at ERROR).
    """

    # GRD-19
    KINDS: ClassVar[tuple[str, ...]] = (
        "social security number",
        "credit card number",
        "email address",
        "phone number",
    )
    """The kinds of personal data it looks for, in the order a refusal names them."""

    def __init__(
        self,
        parent: Identifiable,
        direction: Direction | str = Direction.OUTPUT,
        *,
        timeout: float | None = GUARDRAIL_TIMEOUT,
    ) -> None:
        super().__init__(parent, direction, timeout=timeout)

    @staticmethod
    def kinds_in(text: str) -> list[str]:
        """The kinds of personal data ``text`` carries, in :attr:`KINDS` order."""
        found = []
        if _SSN.search(text):
            found.append("social security number")
        if any(_luhn(re.sub(r"\D", "", m.group())) for m in _CARD.finditer(text)):
            found.append("credit card number")
        if _EMAIL.search(text):
            found.append("email address")
        if _PHONE.search(text):
            found.append("phone number")
        return found

    async def validate(self, target: Any) -> None:
        if target is None:
            return
        text = target if isinstance(target, str) else to_json(target)
        found = self.kinds_in(text)
        if found:
            summary = ", ".join(found)
            log.error(
                "PII detected in the %s of %s: %s",
                self.direction.value.lower(),
                self.gated_tool,
                summary,
            )
            raise GuardrailError(
                f"The {self.direction.value.lower()} of {self.gated_tool} contains personal data "
                f"({summary}); leave it out"
            )


class PrincipalAllowListGuardrail(AuthGuardrail):
    """Admits only the listed principals (workflow user ids); a missing principal is refused.
    ``allowed`` given as a single string is a ``TypeError``."""

    # GRD-18

    def __init__(
        self,
        parent: Identifiable,
        allowed: Iterable[str],
        *,
        timeout: float | None = GUARDRAIL_TIMEOUT,
    ) -> None:
        if isinstance(allowed, str):
            raise TypeError(
                f"PrincipalAllowListGuardrail: allowed is a collection of user ids, got the string {allowed!r}"
            )
        self.allowed = frozenset(allowed)
        """The user ids admitted; empty admits nobody."""
        super().__init__(parent, timeout=timeout)

    async def authorize(self, principal: str | None) -> None:
        allowed = ", ".join(sorted(self.allowed)) or "nobody"
        if principal is None:
            raise GuardrailError(f"No principal: {self.gated_tool} may be used only by [{allowed}]")
        if principal not in self.allowed:
            raise GuardrailError(
                f"Principal '{principal}' may not use {self.gated_tool}; allowed: [{allowed}]"
            )


def _class_name(entry: str | type) -> str:
    if isinstance(entry, type):
        return f"{entry.__module__}.{entry.__qualname__}"
    if isinstance(entry, str) and entry.strip():
        return entry
    raise TypeError(f"an allowed caller is a class or its qualified name, got {entry!r}")


class CallerClassAllowListGuardrail(AdmissionGuardrail):
    """Admits a call only from a listed caller class (the job that submitted the tool, by
    class or fully qualified name); a direct call from outside any job is refused. Run
    outside enforcement it has no admission context and raises
    :class:`~nucleo_trio.errors.UncorrectableError`."""

    # GRD-17

    def __init__(
        self,
        parent: Identifiable,
        allowed: Iterable[str | type],
        *,
        timeout: float | None = GUARDRAIL_TIMEOUT,
    ) -> None:
        if isinstance(allowed, str):
            raise TypeError(
                f"CallerClassAllowListGuardrail: allowed is a collection of classes, got the string {allowed!r}"
            )
        self.allowed = frozenset(_class_name(entry) for entry in allowed)
        """The fully qualified names of the caller classes admitted; empty admits none."""
        super().__init__(parent, timeout=timeout)

    async def check_admission(self, context: AdmissionContext | None) -> None:
        if context is None:
            raise UncorrectableError(
                f"{self.name} has no admission context: it judges a call only under the "
                "dispatcher's enforcement"
            )
        allowed = ", ".join(sorted(self.allowed)) or "no caller"
        tool = context.tool_class.__name__
        if context.caller_class is None:
            raise GuardrailError(
                f"{tool} is not available through a direct call; it may be called from: {allowed}"
            )
        if context.caller_class not in self.allowed:
            raise GuardrailError(
                f"{tool} is not available to {context.caller_class}; it may be called from: {allowed}"
            )


Resolver = Callable[[str], Awaitable[Sequence[str]]]
"""Resolves a host name to its addresses; raises :class:`OSError` when it cannot."""


async def resolve_host(host: str) -> list[str]:
    """The addresses ``host`` resolves to, through ``trio.socket.getaddrinfo``."""
    infos = await trio.socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


_PRIVATE = tuple(
    ipaddress.ip_network(net)
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)


def _forbidden(address: str) -> str | None:
    """Why ``address`` may not be fetched, or ``None``."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_unspecified:
        return "the unspecified address"
    if any(ip in net for net in _PRIVATE if net.version == ip.version):
        return "a private (RFC 1918) address"
    return None


class UrlGuardrail(ContentGuardrail):
    """Refuses a URL that is blank, is not a URI, has no host, does not resolve, or resolves to
    a loopback, private (RFC 1918 or IPv6 unique-local), link-local or unspecified address, so
    a tool cannot be pointed at the machine it runs on or at its network. It judges strings
    only (another target is not given to it); the input by default.

    Every address the host resolves to is judged, so a name that resolves to one public and one
    private address is refused. ``resolver`` replaces the system's resolver (tests pass one
    that answers from a table).
    """

    # GRD-35
    target_type: ClassVar[type | tuple[type, ...] | None] = str
    """``str``: the guard judges only a string target, the URL."""

    def __init__(
        self,
        parent: Identifiable,
        direction: Direction | str = Direction.INPUT,
        *,
        resolver: Resolver | None = None,
        timeout: float | None = GUARDRAIL_TIMEOUT,
    ) -> None:
        super().__init__(parent, direction, timeout=timeout)
        self.resolver: Resolver = resolver or resolve_host
        """What resolves a host name to its addresses; the system resolver unless one was
        given."""

    async def validate(self, target: Any) -> None:
        url = target if isinstance(target, str) else ""
        if not url.strip():
            raise GuardrailError(f"{self.gated_tool} was given a blank URL")
        try:
            parts = urlsplit(url.strip())
            host = parts.hostname
        except ValueError as exc:
            raise GuardrailError(f"'{url}' is not a URI: {exc}") from None
        if not parts.scheme or any(c.isspace() for c in url.strip()):
            raise GuardrailError(f"'{url}' is not a URI")
        if not host:
            raise GuardrailError(f"'{url}' names no host")
        try:
            addresses = [str(ipaddress.ip_address(host))]  # a literal is its own address
        except ValueError:
            addresses = []
        try:
            addresses = addresses or list(await self.resolver(host))
        except OSError as exc:
            raise GuardrailError(f"The host of '{url}' does not resolve ({exc})") from None
        if not addresses:
            raise GuardrailError(f"The host of '{url}' does not resolve")
        for address in addresses:
            why = _forbidden(address)
            if why is not None:
                raise GuardrailError(
                    f"'{url}' resolves to {address}, {why}; {self.gated_tool} may fetch only "
                    "public addresses"
                )


_ARTIFACT_MARKER = re.compile(r"«artifact:[^»]*»")


class ExfiltrationMarkerGuardrail(ContentGuardrail):
    """Refuses text that carries an artifact reference marker (``«artifact:...»``), so a
    stored artifact cannot be smuggled out inside a prompt or a result. It judges string targets
    only, the input by default."""

    # GRD-35
    target_type: ClassVar[type | tuple[type, ...] | None] = str
    """``str``: the guard judges only a string target."""

    async def validate(self, target: Any) -> None:
        if isinstance(target, str) and _ARTIFACT_MARKER.search(target):
            raise GuardrailError(
                f"The {self.direction.value.lower()} of {self.gated_tool} carries an artifact "
                "reference marker («artifact:...»); quote the content, not the reference"
            )
