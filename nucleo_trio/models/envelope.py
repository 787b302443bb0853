"""The compliance envelope: which entries this deployment may ever send data to.

A picker chooses among what is callable; the envelope says what is *permitted*, whatever the
picker thinks. It is sealed once per dispatcher (:class:`EnvelopeSeal`): before the seal a read
answers the refusing default without sealing, the seal itself is accepted once, and a
dispatcher's start seals the default if nobody sealed anything. After the seal nothing a flow
produces can widen it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from .catalog import ModelSpec

__all__ = ["ComplianceEnvelope", "DefaultComplianceEnvelope", "EnvelopeSeal"]


@runtime_checkable
class ComplianceEnvelope(Protocol):
    """Answers whether an entry may serve at all in this deployment."""

    def permits(self, spec: ModelSpec) -> bool:
        """``True`` when ``spec`` may be sent this deployment's data."""
        ...

    def refusal(self, spec: ModelSpec) -> str:
        """Why ``spec`` is refused, for the error that names it."""
        ...


# MOD-17: the default envelope refuses data sharing unless allowed.
class DefaultComplianceEnvelope:
    """The envelope a deployment starts from, and a configurable one.

    Fresh, it permits everything except an entry that requires data sharing
    (``requires_data_share``), because ``allow_data_share`` defaults to false. Optionally:
    ``allowed_provider_keys`` is a whitelist when given; ``denied_provider_keys`` never serve;
    ``denied_identities`` never serve, on any route.
    """

    def __init__(
        self,
        *,
        allow_data_share: bool = False,
        allowed_provider_keys: Iterable[str] | None = None,
        denied_provider_keys: Iterable[str] = (),
        denied_identities: Iterable[str] = (),
    ) -> None:
        self.allow_data_share = allow_data_share
        """Whether an entry with ``requires_data_share`` may serve. Default false."""
        self.allowed_provider_keys = (
            None if allowed_provider_keys is None else frozenset(allowed_provider_keys)
        )
        """The only provider keys whose entries may serve; ``None`` (the default): any key
        that is not denied."""
        self.denied_provider_keys = frozenset(denied_provider_keys)
        """Provider keys whose entries never serve. Empty by default."""
        self.denied_identities = frozenset(denied_identities)
        """Model identities (:attr:`ModelSpec.identity`) that never serve, on any route. Empty
        by default."""

    def permits(self, spec: ModelSpec) -> bool:
        """``True`` unless ``spec`` needs data sharing that is not allowed, its provider key is
        off the allowed list or denied, or its identity is denied."""
        return self._why_not(spec) is None

    def refusal(self, spec: ModelSpec) -> str:
        """The first reason ``spec`` is refused, in the order :meth:`permits` checks; for a
        permitted entry, a sentence saying it is permitted."""
        return self._why_not(spec) or f"the envelope permits {spec.id}"

    def _why_not(self, spec: ModelSpec) -> str | None:
        if spec.requires_data_share and not self.allow_data_share:
            return f"{spec.id} requires data sharing, which this deployment does not allow"
        if (
            self.allowed_provider_keys is not None
            and spec.provider_key not in self.allowed_provider_keys
        ):
            return f"provider {spec.provider_key!r} of {spec.id} is not on the allowed list"
        if spec.provider_key in self.denied_provider_keys:
            return f"provider {spec.provider_key!r} of {spec.id} is denied"
        if spec.identity in self.denied_identities:
            return f"the model {spec.identity!r} ({spec.id}) is denied on every route"
        return None

    def __repr__(self) -> str:
        return (
            f"DefaultComplianceEnvelope(allow_data_share={self.allow_data_share}, "
            f"allowed_provider_keys={self.allowed_provider_keys}, "
            f"denied_provider_keys={set(self.denied_provider_keys) or '{}'}, "
            f"denied_identities={set(self.denied_identities) or '{}'})"
        )


class EnvelopeSeal:
    """One dispatcher's envelope: sealed once, read freely.

    Reach it as ``dispatcher.models.envelope``. Seal yours with
    ``dispatcher.seal_compliance_envelope(envelope)`` before the dispatcher starts: the start
    seals the default, and a second seal is a RuntimeError.
    """

    # ENV-01, ENV-02: one seal per dispatcher; the start seals the default.
    def __init__(self) -> None:
        self._sealed: ComplianceEnvelope | None = None
        self._default = DefaultComplianceEnvelope()

    @property
    def is_sealed(self) -> bool:
        """Whether an envelope has been sealed, by :meth:`seal` or :meth:`seal_default`."""
        return self._sealed is not None

    @property
    def envelope(self) -> ComplianceEnvelope:
        """The sealed envelope; before any seal, the refusing default, without sealing it."""
        return self._sealed if self._sealed is not None else self._default

    def seal(self, envelope: ComplianceEnvelope) -> None:
        """Seal ``envelope``; ``None`` is a ValueError and a second seal a RuntimeError."""
        if envelope is None:
            raise ValueError("seal_compliance_envelope: the envelope must not be None")
        if not isinstance(envelope, ComplianceEnvelope):
            raise TypeError(
                f"seal_compliance_envelope takes a ComplianceEnvelope (permits, refusal), got "
                f"{type(envelope).__name__}"
            )
        if self._sealed is not None:
            raise RuntimeError(
                f"the compliance envelope is already sealed ({self._sealed!r}); it is sealed "
                "once per dispatcher"
            )
        self._sealed = envelope

    def seal_default(self) -> None:
        """At start: seal the default unless something was sealed before."""
        if self._sealed is None:
            self._sealed = self._default
