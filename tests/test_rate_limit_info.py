"""RateLimitInfo (RLI-01..04): the record, its constructors and the header parser; the
OpenAI-compatible client reading ``x-ratelimit-*`` headers off a success and a 429 into a bare
"rate limited" reading; and the models layer handing a CAPACITY reading to the entry's token
bucket (FAC-05), end to end against the fake server in virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.admission import RateLimiterRegistry, TokenBucket, TokenBucketConfig
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.errors import RateLimitRetry, TransientErrorRetry
from nucleo_trio.http import HttpSettings
from nucleo_trio.jobs import JobContext, workflow
from nucleo_trio.llm import (
    Conversation,
    LLMCall,
    LLMRequest,
    Message,
    ObservableLLMClient,
    TextAnswer,
    openai_compatible,
)
from nucleo_trio.llm.clients import (
    LLMResponse,
    RateLimitInfo,
    RateLimitType,
    parse_int_or_null,
)
from nucleo_trio.llm.clients.fake_server import FakeOpenAIServer, FakeReply, serve_fake_openai
from nucleo_trio.llm.clients.openai import OpenAICompatibleClient
from nucleo_trio.models import Grade, ModelRuntime, Providers

from .jobs_for_tests import Fn
from .model_doubles import catalog, entry

# -- the record ---------------------------------------------------------------------------------


async def test_the_minimal_record_says_only_that_the_limit_was_hit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """RLI-01: rate_limited(model) is rate limited, retry after 60 s, 0 tokens and 0 requests
    remaining, no limits, kind UNKNOWN, both per-minute values 0."""
    await trio.sleep(7)
    info = RateLimitInfo.rate_limited("gpt-4o")
    assert info.model == "gpt-4o"
    assert info.was_rate_limited is True
    assert info.retry_after == 60.0
    assert (info.tokens_remaining, info.requests_remaining) == (0, 0)
    assert (info.token_limit, info.request_limit) == (None, None)
    assert info.kind is RateLimitType.UNKNOWN
    assert (info.tokens_per_minute, info.requests_per_minute) == (0, 0)
    assert info.captured_at == 7.0


async def test_the_headers_of_a_successful_response_are_a_capacity_reading() -> None:
    """RLI-02: from_headers is a CAPACITY reading, not rate limited, with no retry-after and
    nothing said of requests; tokens_per_minute is the token limit, requests_per_minute 0."""
    info = RateLimitInfo.from_headers("gpt-4o", 30_000, 29_500, "1s")
    assert info.kind is RateLimitType.CAPACITY
    assert info.was_rate_limited is False
    assert info.retry_after is None
    assert (info.request_limit, info.requests_remaining) == (None, None)
    assert (info.token_limit, info.tokens_remaining, info.reset) == (30_000, 29_500, "1s")
    assert (info.tokens_per_minute, info.requests_per_minute) == (30_000, 0)


async def test_the_per_minute_fields_mirror_the_limits_and_a_null_kind_is_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """RLI-03: the per-minute fields copy the limits, or are 0 when a limit is None; a None
    kind becomes UNKNOWN; captured_at is the construction instant; the kinds are CAPACITY,
    ACCELERATION and UNKNOWN."""
    both = RateLimitInfo(model="m", token_limit=90_000, request_limit=500)
    assert (both.tokens_per_minute, both.requests_per_minute) == (90_000, 500)
    neither = RateLimitInfo(model="m", kind=None)  # type: ignore[arg-type]
    assert (neither.tokens_per_minute, neither.requests_per_minute) == (0, 0)
    assert neither.kind is RateLimitType.UNKNOWN
    assert [k.name for k in RateLimitType] == ["CAPACITY", "ACCELERATION", "UNKNOWN"]
    first = RateLimitInfo(model="m", kind=RateLimitType.ACCELERATION)
    await trio.sleep(12.5)
    second = RateLimitInfo(model="m")
    assert first.kind is RateLimitType.ACCELERATION
    assert second.captured_at is not None and first.captured_at is not None
    assert second.captured_at - first.captured_at == 12.5
    assert second.captured_at == trio.current_time()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (" 42 ", 42),
        ("42", 42),
        ("0", 0),
        ("-3", -3),
        (None, None),
        ("n/a", None),
        ("N/A", None),
        ("", None),
        ("   ", None),
        ("4.5", None),
        ("1_000", None),
        ("6m0s", None),
        ("forty", None),
    ],
)
def test_a_header_value_parses_to_an_integer_or_to_none(
    raw: str | None, expected: int | None
) -> None:
    """RLI-04: parse_int_or_null trims (" 42 " is 42); None, "n/a" and "" are None; anything
    else that is not a plain integer is None too, and it never raises."""
    assert parse_int_or_null(raw) == expected


def test_parse_int_or_null_never_raises_even_on_what_is_not_text() -> None:
    """RLI-04: a value that is not a str at all is None, not an error."""
    assert parse_int_or_null(42) is None  # type: ignore[arg-type]
    assert parse_int_or_null(b"42") is None  # type: ignore[arg-type]


def test_the_record_is_frozen_and_refuses_bad_fields_by_name() -> None:
    """A reading cannot change once taken, and a field out of its range is named."""
    info = RateLimitInfo.rate_limited("m")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        info.model = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="tokens_remaining must be an int >= 0"):
        RateLimitInfo(model="m", tokens_remaining=-1)
    with pytest.raises(ValueError, match="retry_after must be seconds >= 0"):
        RateLimitInfo(model="m", retry_after=-2.0)
    with pytest.raises(ValueError, match="model must be a non-blank str"):
        RateLimitInfo.rate_limited(" ")


def test_a_reading_built_outside_a_trio_run_has_no_instant() -> None:
    """RLI-03: captured_at is read off the trio clock; outside a run there is none."""
    assert RateLimitInfo.rate_limited("m").captured_at is None


def test_response_headers_are_read_without_regard_to_case() -> None:
    """RLI-02, RLI-04: the four x-ratelimit numbers of a success, any case; a malformed or
    negative value is unsaid; with none of them said there is no reading."""
    info = RateLimitInfo.from_response_headers(
        "m",
        {
            "X-RateLimit-Limit-Requests": "500",
            "x-ratelimit-limit-tokens": " 30000 ",
            "x-ratelimit-remaining-requests": "n/a",
            "x-ratelimit-remaining-tokens": "-5",
            "x-ratelimit-reset-tokens": "6m0s",
        },
    )
    assert info is not None and info.kind is RateLimitType.CAPACITY
    assert (info.request_limit, info.token_limit) == (500, 30_000)
    assert (info.requests_remaining, info.tokens_remaining) == (None, None)
    assert (info.requests_per_minute, info.tokens_per_minute) == (500, 30_000)
    assert info.reset == "6m0s" and not info.was_rate_limited
    assert RateLimitInfo.from_response_headers("m", {"content-type": "application/json"}) is None
    assert RateLimitInfo.from_response_headers("m", {"x-ratelimit-limit-tokens": "lots"}) is None


def test_a_rate_limit_failure_carries_the_bare_reading() -> None:
    """RLI-01: the failure record of a 429 signal carries rate_limited(model); other failures,
    and a failure naming no model, carry none."""
    limited = LLMResponse.failure(RateLimitRetry("429"), model="m")
    assert limited.rate_limit_info is not None
    assert limited.rate_limit_info.was_rate_limited and limited.rate_limit_info.model == "m"
    assert LLMResponse.failure(TransientErrorRetry("503"), model="m").rate_limit_info is None
    assert LLMResponse.failure(RateLimitRetry("429"), model=None).rate_limit_info is None


# -- the client ---------------------------------------------------------------------------------

HEADERS = {
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-remaining-tokens": "149000",
    "x-ratelimit-reset-tokens": "400ms",
}


def ask(text: str = "hello") -> LLMRequest:
    return LLMRequest(messages=[Message.user(text)], max_tokens=100)


async def test_the_client_reads_the_headers_of_a_success_into_a_capacity_reading() -> None:
    """RLI-02 over the wire: a completion, plain or streamed, carries the x-ratelimit headers
    as a CAPACITY reading for the model called; without them it carries none."""
    async with serve_fake_openai(
        FakeReply.completion("one", headers=HEADERS),
        FakeReply.completion("two", headers=HEADERS),
        FakeReply.completion("three"),
    ) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            plain = await client.complete(ask())
            streamed = await client.stream(ask(), lambda _: None)
            bare = await client.complete(ask())
    for response in (plain, streamed):
        info = response.rate_limit_info
        assert info is not None and info.model == "m" and info.kind is RateLimitType.CAPACITY
        assert (info.requests_per_minute, info.tokens_per_minute) == (60, 150_000)
        assert (info.requests_remaining, info.tokens_remaining) == (59, 149_000)
        assert info.reset == "400ms"
    assert bare.rate_limit_info is None


async def test_a_429_through_the_observable_wrapper_is_recorded_as_rate_limited() -> None:
    """RLI-01 over the wire: the recorded failure of a 429 carries rate_limited(model)."""
    context = JobContext(Fn(workflow("alice", "wf"), _noop), "alice")
    async with serve_fake_openai(FakeReply.rate_limited(retry_after=3)) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as raw:
            with pytest.raises(RateLimitRetry):
                await ObservableLLMClient(raw, context).complete(ask())
    (failed,) = context.llm_responses
    assert failed.rate_limit_info == attrs.evolve(
        RateLimitInfo.rate_limited("m"), captured_at=failed.rate_limit_info.captured_at
    )


async def _noop(context: JobContext) -> None:
    return None


async def test_the_fake_server_publishes_its_limits_only_when_asked() -> None:
    """The fake server's publish_limits: each success carries its limits and what the window
    has left; a scripted header wins over the published one."""
    async with serve_fake_openai(
        FakeReply.completion("a"),
        FakeReply.completion("b", headers={"x-ratelimit-limit-tokens": "7"}),
        requests_per_minute=10,
        tokens_per_minute=50_000,
        publish_limits=True,
    ) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            first = (await client.complete(ask())).rate_limit_info
            second = (await client.complete(ask())).rate_limit_info
    assert first is not None and second is not None
    assert (first.request_limit, first.requests_remaining) == (10, 9)
    assert first.token_limit == 50_000
    assert first.tokens_remaining == 50_000 - server.requests[0].estimated_tokens()
    assert (second.request_limit, second.requests_remaining, second.token_limit) == (10, 8, 7)


# -- the bucket follows the headers (FAC-05) ----------------------------------------------------


CAT = catalog(
    entry(
        "gpt",
        provider_key="openai",
        wire_model_id="fake-model",
        max_output_tokens=1000,
        tpm=100_000,
        rpm=100,
    )
)
HTTP = 4


@asynccontextmanager
async def running(**server: Any) -> AsyncIterator[tuple[JobDispatcher, FakeOpenAIServer]]:
    async with serve_fake_openai(**server) as fake:
        keys = Providers({})
        keys.register(
            openai_compatible("openai", fake.base_url, http_settings=HttpSettings(pool_size=HTTP))
        )
        models = ModelRuntime(CAT, providers=keys)
        async with open_dispatcher(
            DispatcherConfig(seed=3, http_connections=HTTP), models=models
        ) as dispatcher:
            yield dispatcher, fake


def call(text: str) -> LLMCall[str]:
    conversation = Conversation(output=200, grade=Grade.SMALL)
    conversation.put_objective(text)
    return LLMCall(workflow("u", "rli"), conversation, answer=TextAnswer())


async def test_the_bucket_follows_the_limits_the_provider_publishes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """FAC-05, RLI-02 end to end: the catalog seeds the model's bucket at 100 rpm and 100 000
    tpm; the provider publishes 30 rpm and 40 000 tpm on each success, and after the first call
    the same bucket holds the provider's numbers. A later call still runs
    through it."""
    async with running(requests_per_minute=30, tokens_per_minute=40_000, publish_limits=True) as (
        dispatcher,
        fake,
    ):
        first = call("one")
        assert await dispatcher.submit(first).result() == "echo: one"
        assert first.binding is not None
        bucket = first.binding.account
        assert isinstance(bucket, TokenBucket)
        assert bucket.config == TokenBucketConfig(rpm=30, tpm=40_000, burst=1)
        assert dispatcher.accounts.bucket(CAT.spec("gpt")) is bucket
        await trio.sleep(90)
        second = call("two")
        assert await dispatcher.submit(second).result() == "echo: two"
        assert second.binding is not None and second.binding.account is bucket
        assert bucket.config == TokenBucketConfig(rpm=30, tpm=40_000, burst=1)
        assert len(fake.requests) == 2


async def test_without_headers_the_bucket_keeps_the_catalogs_limits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """FAC-05: an endpoint that publishes nothing leaves the bucket as the catalog seeded it."""
    async with running() as (dispatcher, _):
        job = call("quiet")
        assert await dispatcher.submit(job).result() == "echo: quiet"
        assert job.binding is not None and isinstance(job.binding.account, TokenBucket)
        assert job.binding.account.config == TokenBucketConfig(rpm=100, tpm=100_000, burst=1)


async def test_a_reading_missing_a_per_minute_cap_leaves_the_bucket_alone() -> None:
    """FAC-05: a CAPACITY reading is applied only with both per-minute caps positive; a token
    reading alone (requests_per_minute 0), a bare 429 and a non-CAPACITY reading change nothing;
    an entry admitted on no bucket (no tpm) gets none."""
    runtime = ModelRuntime(CAT)
    registry = RateLimiterRegistry()
    runtime._accounts = registry
    spec = CAT.spec("gpt")
    bucket = registry.bucket(spec)
    seeded = bucket.config
    readings = [
        RateLimitInfo.from_headers("fake-model", 40_000, 39_000, None),
        RateLimitInfo.rate_limited("fake-model"),
        RateLimitInfo(
            model="fake-model",
            token_limit=40_000,
            request_limit=30,
            kind=RateLimitType.ACCELERATION,
        ),
    ]
    for reading in readings:
        runtime.note_success(spec, LLMResponse(model="fake-model", rate_limit_info=reading))
    runtime.note_success(spec, LLMResponse(model="fake-model"))
    runtime.note_success(spec)
    assert registry.bucket(spec) is bucket and bucket.config == seeded
    capacity = RateLimitInfo(
        model="fake-model", token_limit=40_000, request_limit=30, kind=RateLimitType.CAPACITY
    )
    runtime.note_success(spec, LLMResponse(model="fake-model", rate_limit_info=capacity))
    assert bucket.config == TokenBucketConfig(rpm=30, tpm=40_000, burst=1)
    unbounded = catalog(entry("open", tpm=None, rpm=None)).spec("open")
    runtime.note_success(unbounded, LLMResponse(model="open", rate_limit_info=capacity))
    assert len(registry) == 1


async def test_a_published_limit_never_raises_the_bucket_above_the_catalog() -> None:
    """FAC-05 with the catalog as the ceiling: a reading above the entry's rpm and tpm (a
    per-day figure in the same header, say) leaves the bucket at the catalog's numbers; one
    lower on one axis lowers that axis only."""
    runtime = ModelRuntime(CAT)
    registry = RateLimiterRegistry()
    runtime._accounts = registry
    spec = CAT.spec("gpt")
    bucket = registry.bucket(spec)
    seeded = bucket.config
    daily = RateLimitInfo(
        model="fake-model",
        token_limit=seeded.tpm * 1_000,
        request_limit=seeded.rpm * 1_000,
        kind=RateLimitType.CAPACITY,
    )
    runtime.note_success(spec, LLMResponse(model="fake-model", rate_limit_info=daily))
    assert bucket.config == seeded
    fewer_requests = RateLimitInfo(
        model="fake-model",
        token_limit=seeded.tpm * 2,
        request_limit=seeded.rpm // 2,
        kind=RateLimitType.CAPACITY,
    )
    runtime.note_success(spec, LLMResponse(model="fake-model", rate_limit_info=fewer_requests))
    assert bucket.config == TokenBucketConfig(rpm=seeded.rpm // 2, tpm=seeded.tpm, burst=1)
