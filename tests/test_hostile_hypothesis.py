"""Hostile values, drawn by hypothesis, fed to every public setter and account method.

Each surface a user (or a plugin) hands a number to is listed once with what it must refuse:
NaN, the infinities, negatives, zero where zero makes no sense, bools, strings, bytes, complex
numbers, containers and integers too big for a float. Every refusal is a ``TypeError`` or a
``ValueError`` raised where the value is given, naming the setting and showing the value. The
async half hands the same values to a running dispatcher (on a job, behind a job's setters, as a
job's demand, from an account's answers, to ``shutdown``) and checks that only the offender is
refused while the next ordinary job still completes, with every permit back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate, TokenBucket, TokenBucketConfig
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.dispatch.timekeeper import Timekeeper
from nucleo_trio.jobs import JobRequirements, workflow

from .jobs_for_tests import Echo

NAN = float("nan")
INF = float("inf")

# -- what each kind of setting must refuse -------------------------------------------------------

_not_numbers = st.one_of(
    st.booleans(),
    st.text(max_size=6),
    st.binary(max_size=4),
    st.complex_numbers(allow_nan=False, allow_infinity=False, min_magnitude=1e-3),
    st.lists(st.integers(), max_size=2),
    st.just(object()),
)
_nonfinite = st.sampled_from([NAN, INF, -INF])
_negative = st.one_of(
    st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False),
    st.integers(max_value=-1),
)
_huge = st.integers(min_value=10**309, max_value=10**400)  # past any float

SECONDS = st.one_of(_not_numbers, _nonfinite, _negative, st.just(0), st.just(0.0), _huge)
"""A duration that must be positive and finite (a job's timeout)."""

WAIT = st.one_of(_not_numbers, _nonfinite.filter(math.isnan), _negative)
"""A duration that may be zero but not negative, NaN or no number (shutdown's timeout)."""

AMOUNT = st.one_of(_not_numbers.filter(lambda v: not isinstance(v, list)), _nonfinite, _negative)
"""An amount of tokens or permits."""

COUNT = st.one_of(
    _not_numbers, _nonfinite, _negative, st.floats(allow_nan=False, allow_infinity=False)
)
"""A whole number of things (retries, connections)."""


def _shown(value: Any) -> str:
    """The part of the value a refusal must show (huge values may be cut short)."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return repr(value)[:12]


def _refuses(call: Callable[[], object], *names: str, value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as caught:
        call()
    message = str(caught.value)
    for name in names:
        assert name in message, f"{message!r} does not name {name!r}"
    if not isinstance(value, object) or type(value) is object:
        return  # an anonymous object has no repr worth matching
    assert _shown(value) in message or str(value)[:12] in message, (
        f"{message!r} does not show {value!r}"
    )


# -- the setters, one hypothesis test each -------------------------------------------------------

ROOT = workflow("u", "hostile")


@given(value=SECONDS)
def test_a_job_timeout_refuses_what_is_no_duration(value: Any) -> None:
    job = Echo(ROOT)
    _refuses(lambda: setattr(job, "timeout", value), "Echo.timeout", value=value)
    assert job.timeout == 60.0


PRIORITY = st.one_of(_not_numbers, _nonfinite, _huge, st.floats(allow_nan=False))
"""A priority that is no int of the allowed range."""


@given(value=PRIORITY)
def test_a_job_priority_refuses_what_is_no_int(value: Any) -> None:
    job = Echo(ROOT)
    _refuses(lambda: setattr(job, "priority", value), "Echo.priority", value=value)


@given(value=COUNT.filter(lambda v: not (type(v) is int and v >= 0)))
def test_a_job_retry_budget_refuses_what_is_no_count(value: Any) -> None:
    job = Echo(ROOT)
    _refuses(lambda: setattr(job, "upstream_retries", value), "upstream_retries", value=value)


@given(
    field=st.sampled_from(["http_connections", "health_every", "seed"]),
    value=COUNT,
    from_data=st.booleans(),
)
def test_a_config_count_refuses_what_is_no_count(field: str, value: Any, from_data: bool) -> None:
    if field == "seed" and type(value) is int:
        return  # any int seeds
    if from_data:
        _refuses(lambda: DispatcherConfig.from_mapping({field: value}), field, value=value)
    else:
        _refuses(lambda: DispatcherConfig(**{field: value}), field, value=value)


@given(value=st.one_of(WAIT, st.just(INF), st.just(-INF)), from_data=st.booleans())
def test_the_config_shutdown_timeout_refuses_what_is_no_wait(value: Any, from_data: bool) -> None:
    build = (
        (lambda: DispatcherConfig.from_mapping({"shutdown_timeout": value}))
        if from_data
        else (lambda: DispatcherConfig(shutdown_timeout=value))
    )
    _refuses(build, "shutdown_timeout", value=value)


@given(value=AMOUNT)
def test_a_declared_amount_is_refused_naming_the_account(value: Any) -> None:
    bucket = TokenBucket("gpt-x", TokenBucketConfig(rpm=100, tpm=1000))
    _refuses(lambda: JobRequirements().require_rate_limiter(bucket, value), "gpt-x", value=value)


@given(value=AMOUNT, method=st.sampled_from(["fits", "try_take", "give", "earliest_fit"]))
def test_an_account_method_refuses_a_hostile_amount_and_never_moves(
    value: Any, method: str
) -> None:
    bucket = TokenBucket("gpt-x", TokenBucketConfig(rpm=100, tpm=1000), clock=lambda: 0.0)
    before = bucket.status()
    args = ([value],) if method == "give" else ([value], [])
    _refuses(lambda: getattr(bucket, method)(*args), value=value)
    assert bucket.status() == before


@given(value=COUNT.filter(lambda v: not (type(v) is int and v > 0)))
def test_a_gate_capacity_refuses_what_is_no_count(value: Any) -> None:
    _refuses(lambda: CountingGate("slots", value), "capacity", value=value)


@given(value=st.one_of(_not_numbers.filter(lambda v: type(v) is not bool), st.just(NAN)))
async def test_the_timekeeper_refuses_a_when_that_is_no_time(value: Any) -> None:
    keeper = Timekeeper()
    _refuses(lambda: keeper.call_at(value, lambda: None), value=value)
    assert len(keeper) == 0


# -- a running dispatcher keeps serving ---------------------------------------------------------


class _Answers(CountingGate):
    """A gate of one whose ``fits``/``try_take`` and ``earliest_fit`` answer whatever the test
    says (a plugin gone wrong)."""

    def __init__(self, fits: Any, earliest: Any) -> None:
        super().__init__("wayward", 1)
        self._fits = fits
        self._earliest = earliest

    def fits(self, mine: Any, reserved_ahead: Any) -> Any:
        return self._fits

    def try_take(self, mine: Any, reserved_ahead: Any) -> Any:
        return self._fits

    def earliest_fit(self, mine: Any, reserved_ahead: Any) -> Any:
        return self._earliest


HOSTILE_ANSWER = st.one_of(
    st.tuples(st.sampled_from([None, "yes", 1, 0, NAN]), st.none()),
    st.tuples(st.just(False), st.sampled_from(["soon", NAN, -INF, True, [1.0]])),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    where=st.sampled_from(["timeout", "priority", "amount", "answer", "shutdown"]), data=st.data()
)
async def test_a_hostile_value_is_refused_and_the_dispatcher_keeps_serving(
    where: str, data: st.DataObject
) -> None:
    """Whatever the hostile value and wherever it is handed in, only its own job (or call) is
    refused, by name, and an ordinary job on a gate submitted after it still completes."""
    kind = {"timeout": SECONDS, "priority": PRIORITY, "amount": AMOUNT, "shutdown": WAIT}
    value = data.draw(kind.get(where, st.none()), label="value")
    answer = data.draw(HOSTILE_ANSWER, label="answer")
    gate = CountingGate("slot", 1)

    def ordinary(account: Any, amount: Any = None) -> JobRequirements:
        return JobRequirements().require_rate_limiter(account, amount)

    async with open_dispatcher() as d:
        if where in ("timeout", "priority"):
            job = Echo(ROOT)
            try:
                setattr(job, where, value)
            except (TypeError, ValueError):
                # Written past the setter instead: the door refuses it, born failed.
                object.__setattr__(job, f"_nucleo_{where}", value)
                handle = d.submit(job)
                assert handle.done and handle.error is not None
                assert where in str(handle.error) or where in str(handle.error.__cause__)
            else:
                pytest.fail(f"{where}={value!r} was accepted")
        elif where == "amount":
            bucket = TokenBucket("gpt-x", TokenBucketConfig(rpm=100, tpm=1000))
            with pytest.raises((TypeError, ValueError), match="gpt-x"):
                Echo(ROOT, requirements=lambda: ordinary(bucket, value)).requirements()
        elif where == "answer":
            wayward = _Answers(*answer)
            handle = d.submit(Echo(ROOT, requirements=lambda: ordinary(wayward)))
            with pytest.raises(errors.UncorrectableError, match="wayward"):
                await handle.result()
        else:
            try:
                await d.shutdown(timeout=value)
            except (TypeError, ValueError) as exc:
                assert "shutdown(timeout)" in str(exc)
                assert d.is_running
            else:
                pytest.fail(f"shutdown(timeout={value!r}) was accepted")
        served = d.submit(Echo(ROOT, "served", requirements=lambda: ordinary(gate)))
        assert await served.result() == "served"
        assert gate.in_use == 0
