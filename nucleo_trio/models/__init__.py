"""Models: the catalog, grades, pins, the picker, the compliance envelope, bindings, pricing,
spend.

A job names what it needs in words (a :class:`Grade`, a :class:`Depth`, an :class:`OutputSize`)
through a :class:`ModelBinding` in its requirements; the dispatcher's :class:`ModelRuntime`
resolves it to a :class:`ModelSpec` of the :class:`ModelCatalog` through the picker and the
:class:`ComplianceEnvelope`, prices it, lets every :class:`SpendGate` judge it, and puts its
reservation at the head of the attempt's demand. :class:`Cost` is money exact to 1e-9 in one
currency; :class:`CostLedger` records every call and caps spend per workflow.
"""

from .binding import (
    ModelBinding as ModelBinding,
    OutputDeclaration as OutputDeclaration,
    WiredConversation as WiredConversation,
)
from .catalog import (
    CATALOG_ENV_VAR as CATALOG_ENV_VAR,
    ModelCatalog as ModelCatalog,
    ModelSpec as ModelSpec,
    ProviderDefaults as ProviderDefaults,
    load_catalog as load_catalog,
)
from .envelope import (
    ComplianceEnvelope as ComplianceEnvelope,
    DefaultComplianceEnvelope as DefaultComplianceEnvelope,
    EnvelopeSeal as EnvelopeSeal,
)
from .grades import (
    Depth as Depth,
    EntryStatus as EntryStatus,
    Grade as Grade,
    Input as Input,
    ModelKind as ModelKind,
    OutputSize as OutputSize,
    ThinkingMode as ThinkingMode,
)
from .picker import (
    Attempt as Attempt,
    AvailabilityBook as AvailabilityBook,
    DefaultModelPicker as DefaultModelPicker,
    ModelPicker as ModelPicker,
    Provider as Provider,
    Providers as Providers,
    RouteHealth as RouteHealth,
    Situation as Situation,
    Turnoff as Turnoff,
    failover_share as failover_share,
)
from .pricing import Cost as Cost
from .runtime import (
    ModelDemandAssembler as ModelDemandAssembler,
    ModelRuntime as ModelRuntime,
    binding_accounts as binding_accounts,
)
from .spend import (
    Call as Call,
    CostLedger as CostLedger,
    SpendGate as SpendGate,
    WorkflowSpend as WorkflowSpend,
)

__all__ = [
    "CATALOG_ENV_VAR",
    "Attempt",
    "AvailabilityBook",
    "Call",
    "ComplianceEnvelope",
    "Cost",
    "CostLedger",
    "DefaultComplianceEnvelope",
    "DefaultModelPicker",
    "Depth",
    "EntryStatus",
    "EnvelopeSeal",
    "Grade",
    "Input",
    "ModelBinding",
    "ModelCatalog",
    "ModelDemandAssembler",
    "ModelKind",
    "ModelPicker",
    "ModelRuntime",
    "ModelSpec",
    "OutputDeclaration",
    "OutputSize",
    "Provider",
    "ProviderDefaults",
    "Providers",
    "RouteHealth",
    "Situation",
    "SpendGate",
    "ThinkingMode",
    "Turnoff",
    "WiredConversation",
    "WorkflowSpend",
    "binding_accounts",
    "failover_share",
    "load_catalog",
]
