"""Language models: the clients that call them, and the records of what was asked and answered.

``clients`` holds the :class:`LLMClient` and :class:`EmbeddingsClient` protocols, the request
and response records, the observable wrappers that record every call on a job's context, a
scripted fake and an OpenAI-compatible client over httpx.

Above the clients: :class:`Conversation` (the turns, one owner at a time), :class:`LLMCall` (one
model call as a job, corrected and re-run), the response handlers that read a reply, and the
goal-directed :class:`Thinker`.
"""

from .answers import (
    RawResponse as RawResponse,
    ResponseHandler as ResponseHandler,
    StructuredAnswer as StructuredAnswer,
    TextAnswer as TextAnswer,
    llm_required as llm_required,
)
from .call import LLMCall as LLMCall
from .clients import (
    EmbeddingPurpose as EmbeddingPurpose,
    EmbeddingsClient as EmbeddingsClient,
    EmbeddingsResponse as EmbeddingsResponse,
    LLMClient as LLMClient,
    LLMRequest as LLMRequest,
    LLMResponse as LLMResponse,
    Message as Message,
    ObservableEmbeddingsClient as ObservableEmbeddingsClient,
    ObservableLLMClient as ObservableLLMClient,
    OpenAICompatibleClient as OpenAICompatibleClient,
    OpenAICompatibleEmbeddingsClient as OpenAICompatibleEmbeddingsClient,
    OutputSchema as OutputSchema,
    Role as Role,
    ScriptedEmbeddingsClient as ScriptedEmbeddingsClient,
    ScriptedLLMClient as ScriptedLLMClient,
    ToolCall as ToolCall,
    ToolSpec as ToolSpec,
    Usage as Usage,
    reply as reply,
)
from .conversation import (
    Conversation as Conversation,
    ConversationCarrier as ConversationCarrier,
    ConversationStore as ConversationStore,
    conversation_store as conversation_store,
)
from .providers import openai_compatible as openai_compatible, scripted as scripted
from .thinker import (
    Thinker as Thinker,
    ThinkerDeclaration as ThinkerDeclaration,
    ThinkerTool as ThinkerTool,
)

__all__ = [
    "Conversation",
    "ConversationCarrier",
    "ConversationStore",
    "LLMCall",
    "RawResponse",
    "ResponseHandler",
    "StructuredAnswer",
    "TextAnswer",
    "Thinker",
    "ThinkerDeclaration",
    "ThinkerTool",
    "conversation_store",
    "llm_required",
    "openai_compatible",
    "scripted",
    "EmbeddingPurpose",
    "EmbeddingsClient",
    "EmbeddingsResponse",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "ObservableEmbeddingsClient",
    "ObservableLLMClient",
    "OpenAICompatibleClient",
    "OpenAICompatibleEmbeddingsClient",
    "OutputSchema",
    "Role",
    "ScriptedEmbeddingsClient",
    "ScriptedLLMClient",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "reply",
]
