"""The one interface through which a job takes over a conversation by id.

A heartbeat that carries a conversation id fires only a job class that implements
:class:`ConversationCarrier`, and a thinker implements it to resume a conversation. The
interface is nominal on purpose: a class that merely has a method of the same name does not
implement it.
"""

# HB-02 (a heartbeat's conversation goes only to a carrier), TOOL-34 (a thinker resumes one).

from __future__ import annotations

import abc

__all__ = ["ConversationCarrier"]


class ConversationCarrier(abc.ABC):
    """A job that takes over a conversation by id: the only way a heartbeat hands one over.

    Implementing this interface is the job class's claim that it adopts a conversation (a thinker
    resumes it, and fails if no store holds it). A heartbeat naming a ``conversation_id`` fires
    only a job class that implements it; a class with a method of the same name that does not
    implement the interface fails the fire, so a coincidental setter can never swallow the
    continuity obligation. The adoption itself belongs inside the job's execution, so the
    heartbeat scheduler never waits on it.
    """

    @abc.abstractmethod
    def set_conversation_id(self, conversation_id: str) -> None:
        """Take over the conversation ``conversation_id`` when this job runs."""
