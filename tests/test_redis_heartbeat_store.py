"""The Redis heartbeat store against a real redis-server: the store contract, and its own rules.

The contract is the one every shipped store passes (``tests/test_heartbeat_store.py``, HB-13..16
and HB-03): its test functions are imported here and run against
:class:`~nucleo_trio_redis.heartbeat_store.RedisHeartbeatStore` through this module's ``store``
fixture. Each test gets a key prefix of its own on the session's server. Nothing here waits on a
clock: the claims these tests inspect live for minutes.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nucleo_trio_redis.heartbeat_store import RedisHeartbeatStore

from . import test_heartbeat_store as contract

# The contract, run here against this module's `store` fixture.
test_poll_due_answers_the_most_overdue_first_and_never_a_future_one = (
    contract.test_poll_due_answers_the_most_overdue_first_and_never_a_future_one
)
test_entries_due_at_one_instant_come_out_by_id = (
    contract.test_entries_due_at_one_instant_come_out_by_id
)
test_rebind_displaces_and_cancel_removes = contract.test_rebind_displaces_and_cancel_removes
test_the_recurrence_compare_and_set_yields_to_a_competing_rebind = (
    contract.test_the_recurrence_compare_and_set_yields_to_a_competing_rebind
)
test_head_changes_fire_the_listener = contract.test_head_changes_fire_the_listener
test_a_listener_that_raises_is_logged_and_the_others_still_run = (
    contract.test_a_listener_that_raises_is_logged_and_the_others_still_run
)
test_a_forged_heartbeat_cannot_be_enqueued = contract.test_a_forged_heartbeat_cannot_be_enqueued

_PREFIXES = itertools.count()


def fresh_prefix(name: str) -> str:
    return f"test-hb-{name}-{next(_PREFIXES)}"


@pytest.fixture
async def store(
    redis_server: Any, request: pytest.FixtureRequest
) -> AsyncIterator[RedisHeartbeatStore]:
    built = RedisHeartbeatStore(
        redis_server.url, prefix=fresh_prefix(request.node.name), claim_ttl=300
    )
    yield built
    await built.aclose()
