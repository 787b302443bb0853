"""Hostile values at admission: wrong answers from an account, and amounts no account can take.

An account's wrong answer (``fits`` that is not a bool, ``earliest_fit`` that is not an
instant) is a fault of that account: only its waiter is refused, naming the account and the
value, and the evaluator goes on granting everyone else. An amount that is NaN, infinite,
negative, a bool or a complex number is refused where it is declared, naming the limiter and the
value, so it never reaches an account; the accounts refuse it themselves too, for direct callers.
"""

from __future__ import annotations

import decimal
import fractions
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from nucleo_trio.admission import (
    CountingGate,
    DatabaseGate,
    Demand,
    DemandEntry,
    ElasticWindow,
    HttpConnectionGate,
    LimiterEventType,
    ModelGate,
    StdioEndpointGate,
    StdioPoolGate,
    TokenBucket,
    TokenBucketConfig,
)
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs import JobRequirements, workflow
from nucleo_trio.jobs.requirements import LimiterRequirement

from .admission_doubles import FakeJob, Meter
from .jobs_for_tests import Echo
from .test_admission import Events, FakeMemory, Probe, park, running, settle

NAN, INF = math.nan, math.inf


class Answering(CountingGate):
    """A gate that answers one question with whatever the test sets in ``answers``."""

    def __init__(self, name: str, capacity: int = 1, **answers: Any) -> None:
        super().__init__(name, capacity)
        self.answers = answers
        self.asked: dict[str, int] = {}

    def _answer(self, question: str, default: Callable[[], Any]) -> Any:
        self.asked[question] = self.asked.get(question, 0) + 1
        if question in self.answers:
            return self.answers[question]
        return default()

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return self._answer("fits", lambda: super(Answering, self).fits(mine, reserved_ahead))  # type: ignore[no-any-return]

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return self._answer(  # type: ignore[no-any-return]
            "try_take", lambda: super(Answering, self).try_take(mine, reserved_ahead)
        )

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return self._answer(  # type: ignore[no-any-return]
            "earliest_fit", lambda: super(Answering, self).earliest_fit(mine, reserved_ahead)
        )


# --------------------------------------------------------------------------------------------
# An account's wrong answer refuses only its waiter
# --------------------------------------------------------------------------------------------

WRONG_FITS = [None, "yes", 1, 0, 1.0, object()]


async def _only_the_victim_is_refused(
    hostile: CountingGate, caplog: pytest.LogCaptureFixture, *, inline: bool
) -> tuple[UncorrectableError, Probe, Events]:
    """Park a waiter behind a held gate, then admit a victim on ``[taken_first, hostile]``
    (inline: with the line empty, so the fast path meets the fault). The victim must be
    refused, the waiter granted once the holder releases, and the evaluator still serving."""
    busy = CountingGate("busy", 1)
    taken_first = Probe("taken-first", 1)
    events = Events()
    async with running(emit=events) as (admission, nursery):
        victim_demand = Demand().add(taken_first).add(hostile)
        with caplog.at_level(logging.ERROR, logger="nucleo_trio.admission"):
            if inline:
                with pytest.raises(UncorrectableError) as raised:
                    await admission.admit(victim_demand, FakeJob("victim"))
                error = raised.value
                holder = await admission.admit(Demand().add(busy), FakeJob("holder"))
                behind = await park(nursery, admission, Demand().add(busy), "behind")
            else:
                holder = await admission.admit(Demand().add(busy), FakeJob("holder"))
                behind = await park(nursery, admission, Demand().add(busy), "behind")
                victim = await park(nursery, admission, victim_demand, "victim")
                assert isinstance(victim.error, UncorrectableError)
                error = victim.error
        assert taken_first.in_use == 0, "what the attempt took is given back"
        assert ("hostile", LimiterEventType.REJECTED, "aborted") in events.of("victim")
        assert any(
            r.levelno == logging.ERROR and "hostile failed during admission" in r.getMessage()
            for r in caplog.records
        )
        admission.release(holder)
        await settle()
        assert behind.grant is not None, "the evaluator goes on granting the others"
        admission.release(behind.grant)
        again = await admission.admit(Demand().add(busy), FakeJob("after"))
        admission.release(again)
        assert not admission.is_stopped and admission.queue_size == 0
    return error, taken_first, events


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "parked"])
@pytest.mark.parametrize("answer", WRONG_FITS, ids=repr)
async def test_fits_answering_anything_but_a_bool_refuses_only_that_waiter(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture, answer: Any, inline: bool
) -> None:
    """ADM-41, ADM-42, ADM-43: a fits that answers None, a truthy string, 1 or an object is an
    account fault: that waiter alone is refused with UncorrectableError naming the account and
    the value (never parked forever), and everyone else is still granted."""
    hostile = Answering("hostile", fits=answer)
    error, _, _ = await _only_the_victim_is_refused(hostile, caplog, inline=inline)
    kind = type(answer).__name__
    assert str(error) == (
        f"hostile failed during admission: fits returned {answer!r} (a {kind}); "
        "it must return True or False"
    )
    assert isinstance(error.__cause__, TypeError)
    assert hostile.asked == {"fits": 1}, "refused at its first answer, never asked again"


@pytest.mark.parametrize("answer", [None, "ok", 1], ids=repr)
async def test_try_take_answering_anything_but_a_bool_refuses_only_that_waiter(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture, answer: Any
) -> None:
    """ADM-41, ADM-43: a try_take that answers None, a string or 1 is a fault: the entries taken
    before it are given back, the waiter is refused naming the value, the others go on."""
    hostile = Answering("hostile", try_take=answer)
    error, taken_first, _ = await _only_the_victim_is_refused(hostile, caplog, inline=False)
    assert str(error).startswith(f"hostile failed during admission: try_take returned {answer!r}")
    assert ("give", (None,), ()) in taken_first.calls


WRONG_INSTANTS = ["soon", NAN, -INF, True, 3 + 0j, object(), decimal.Decimal("NaN")]


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "parked"])
@pytest.mark.parametrize("answer", WRONG_INSTANTS, ids=repr)
async def test_earliest_fit_answering_no_instant_refuses_only_that_waiter(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture, answer: Any, inline: bool
) -> None:
    """ADM-41, ADM-42, ADM-43: an earliest_fit that answers "soon", NaN, -inf, a bool or any
    other non-instant crashes nothing: that waiter is refused naming the account and the value,
    the evaluator keeps granting everyone else."""
    hostile = Answering("hostile", fits=False, earliest_fit=answer)
    error, _, _ = await _only_the_victim_is_refused(hostile, caplog, inline=inline)
    kind = type(answer).__name__
    assert str(error).startswith(
        f"hostile failed during admission: earliest_fit returned {answer!r} (a {kind}); "
        "it must return None (only an event can help) or a trio.current_time() instant"
    )


async def test_the_message_for_soon_names_the_account_the_value_and_the_contract(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-42: the whole refusal for the issue's "soon", as the job sees it."""
    hostile = Answering("search-quota", fits=False, earliest_fit="soon")
    async with running() as (admission, _):
        with pytest.raises(UncorrectableError) as raised:
            await admission.admit(Demand().add(hostile), FakeJob("j"))
    assert str(raised.value) == (
        "search-quota failed during admission: earliest_fit returned 'soon' (a str); it must "
        "return None (only an event can help) or a trio.current_time() instant, an int or a "
        "float (+inf reads as None; not NaN, -inf or a bool)"
    )


async def test_a_nan_deadline_neither_spins_the_evaluator_nor_stops_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-41, ADM-43: a NaN from earliest_fit refuses its waiter and arms no timer, while a
    healthy waiter's deadline is kept: it is granted at exactly its instant. The evaluator
    sleeps in between (its clock is read a handful of times, not in a loop)."""
    reads = 0

    def clock() -> float:
        nonlocal reads
        reads += 1
        if reads > 10_000:
            raise RuntimeError("the evaluator is spinning")
        return trio.current_time()

    meter = Meter("meter", 100, 10, level=0)  # 50 tokens are 5 s away
    hostile = Answering("hostile", fits=False, earliest_fit=NAN)
    async with running(clock=clock) as (admission, nursery):
        start = trio.current_time()
        healthy = await park(nursery, admission, Demand().add(meter, 50), "healthy")
        victim = await park(nursery, admission, Demand().add(hostile), "victim")
        assert isinstance(victim.error, UncorrectableError)
        assert "earliest_fit returned nan (a float)" in str(victim.error)
        before = reads
        await trio.sleep(1000)
        assert healthy.granted_at is not None
        assert healthy.granted_at - start == pytest.approx(5.0)
        assert reads - before < 20, f"{reads - before} clock reads while 1000 s went by"
        assert not admission.is_stopped


async def test_an_infinite_earliest_fit_means_only_an_event_helps(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ACC-05, ADM-30: +inf from earliest_fit is read as None (the clock alone never closes the
    gap): the waiter stays parked with no timer armed and is granted by the next give; a
    finite int or Fraction instant is kept as a deadline."""
    gate = Answering("inf-gate", earliest_fit=INF)
    async with running() as (admission, nursery):
        holder = await admission.admit(Demand().add(gate), FakeJob("holder"))
        waiter = await park(nursery, admission, Demand().add(gate), "waiter")
        await trio.sleep(86_400)
        assert waiter.grant is None and waiter.error is None
        admission.release(holder)
        await settle()
        assert waiter.grant is not None
        admission.release(waiter.grant)

        for kind in (int, fractions.Fraction):
            at = int(trio.current_time()) + 7
            timed = Answering("timed", fits=False, earliest_fit=kind(at))
            parked = await park(nursery, admission, Demand().add(timed), "timed")
            timed.answers["fits"] = True
            await trio.sleep(at + 1 - trio.current_time())
            assert parked.grant is not None, f"granted at its {kind.__name__} instant"
            assert parked.granted_at == pytest.approx(at)
            admission.release(parked.grant)


async def test_an_account_that_always_answers_already_is_not_asked_in_a_loop(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-19, ADM-43: an account that keeps saying it is short and that its gap closed in the
    past contradicts itself; the evaluator looks again every 10 ms instead of at once forever
    (which would spin a core and freeze a virtual clock), others are granted, and the waiter
    goes as soon as the account says it fits."""
    reads = 0

    def clock() -> float:
        nonlocal reads
        reads += 1
        if reads > 100_000:
            raise RuntimeError("the evaluator is spinning")
        return trio.current_time()

    stuck = Answering("stuck", fits=False, earliest_fit=0.0)
    slots = CountingGate("slots", 1)
    async with running(clock=clock) as (admission, nursery):
        waiter = await park(nursery, admission, Demand().add(stuck), "waiter")
        other = await admission.admit(Demand().add(slots), FakeJob("other"))
        admission.release(other)
        start = trio.current_time()
        await trio.sleep(1)
        assert waiter.grant is None and 50 <= stuck.asked["fits"] <= 150
        stuck.answers["fits"] = True
        await trio.sleep(1)
        assert waiter.grant is not None and waiter.granted_at is not None
        assert waiter.granted_at - start <= 1.011


async def test_an_account_that_cannot_take_the_wake_refuses_only_its_admit(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-10, ADM-41: an account whose on_capacity_change raises refuses the admit that
    named it, naming the account; the accounts named before it in that demand are not left
    tracked, and the next demand is admitted as usual."""

    class Deaf(CountingGate):
        def on_capacity_change(self, wake: Callable[[], None] | None) -> None:
            if wake is not None:
                raise RuntimeError("no wake slot")

    first = CountingGate("first", 1)
    async with running() as (admission, _):
        with pytest.raises(UncorrectableError, match=r"^deaf failed during admission: "):
            await admission.admit(Demand().add(first).add(Deaf("deaf", 1)), FakeJob("j"))
        assert admission.accounts() == () and first.in_use == 0
        admission.release(await admission.admit(Demand().add(first), FakeJob("next")))


async def test_memory_answering_none_refuses_with_its_name(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-41, ADM-26: a memory account whose fits answers None refuses the resourceful waiter
    naming memory; an orchestrator's empty demand never meets memory and is granted."""

    class Shrugging(FakeMemory):
        def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
            return None  # type: ignore[return-value]

    async with running(Shrugging()) as (admission, _):
        with pytest.raises(UncorrectableError, match=r"^memory failed during admission: fits"):
            await admission.admit(Demand().add(CountingGate("slot", 1)), FakeJob("j"))
        assert (await admission.admit(Demand(), FakeJob("orchestrator"))).is_empty
        assert admission.accounts() == ()


async def test_a_dispatcher_keeps_serving_around_a_hostile_account(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ADM-41, ADM-43 through a dispatcher: jobs on an account answering "soon" or NaN fail
    naming it; jobs on healthy accounts before, beside and after them all succeed."""
    soon = Answering("soon-quota", fits=False, earliest_fit="soon")
    nan = Answering("nan-quota", fits=False, earliest_fit=NAN)
    slots = CountingGate("slots", 1)

    def needs(account: CountingGate) -> Callable[[], JobRequirements]:
        return lambda: JobRequirements().require_rate_limiter(account)

    async with open_dispatcher(DispatcherConfig(health_every=None)) as dispatcher:
        root = workflow("alice", "hostile")
        healthy = [dispatcher.submit(Echo(root, sleep=1, requirements=needs(slots))) for _ in "ab"]
        bad = [dispatcher.submit(Echo(root, requirements=needs(a))) for a in (soon, nan)]
        healthy.append(dispatcher.submit(Echo(root, sleep=1, requirements=needs(slots))))
        with pytest.raises(UncorrectableError, match="soon-quota failed during admission"):
            await bad[0].result()
        with pytest.raises(UncorrectableError, match=r"nan-quota .*returned nan"):
            await bad[1].result()
        for handle in healthy:
            assert await handle.result() == "ok"
        late = dispatcher.submit(Echo(root, requirements=needs(slots)))
        assert await late.result() == "ok"
        assert dispatcher.admission.accounts() == ()


# --------------------------------------------------------------------------------------------
# Amounts: refused where they are declared, naming the limiter and the value
# --------------------------------------------------------------------------------------------

BAD_AMOUNTS: list[tuple[Any, type[Exception], str]] = [
    (NAN, ValueError, "nan"),
    (INF, ValueError, "inf"),
    (-INF, ValueError, "-inf"),
    (-1, ValueError, "-1"),
    (-0.5, ValueError, "-0.5"),
    (True, TypeError, "True"),
    (False, TypeError, "False"),
    (1 + 2j, TypeError, r"\(1\+2j\)"),
    (decimal.Decimal("NaN"), ValueError, "Decimal"),
    (decimal.Decimal("-3"), ValueError, "Decimal"),
    (fractions.Fraction(-1, 2), ValueError, "Fraction"),
]


def _bucket(tpm: int = 1000) -> TokenBucket:
    return TokenBucket("gpt-x", TokenBucketConfig(rpm=100, tpm=tpm), clock=_trio_or_zero)


def _trio_or_zero() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0


@pytest.mark.parametrize(("amount", "error", "shown"), BAD_AMOUNTS, ids=repr)
def test_a_bad_amount_is_refused_by_the_demand_naming_limiter_and_value(
    amount: Any, error: type[Exception], shown: str
) -> None:
    """DG-01: Demand.add and a DemandEntry built directly refuse a bool, NaN, an infinity, a
    negative or a complex amount before any account sees it, naming the limiter and the value;
    on a gate as on a bucket."""
    for limiter in (_bucket(), CountingGate("slots", 3)):
        name = limiter.limiter_name
        with pytest.raises(error, match=rf"Demand.add: the amount on '{name}' .*got {shown}"):
            Demand().add(limiter, amount)
        with pytest.raises(error, match=rf"DemandEntry: the amount on '{name}' .*got {shown}"):
            DemandEntry(limiter, limiter, (None, amount))


@pytest.mark.parametrize(("amount", "error", "shown"), BAD_AMOUNTS, ids=repr)
def test_a_bad_amount_is_refused_at_declaration(
    amount: Any, error: type[Exception], shown: str
) -> None:
    """JR-04: require_rate_limiter refuses a bad amount when the job declares it, naming the
    limiter and the value, before anything is submitted or held."""
    bucket = _bucket()
    with pytest.raises(error, match=rf"require_rate_limiter: the amount on 'gpt-x' .*got {shown}"):
        JobRequirements().require_rate_limiter(bucket, amount)
    with pytest.raises(error, match="require_rate_limiter"):
        LimiterRequirement(bucket, amount)


@pytest.mark.parametrize("amount", [None, "1000", b"10", [5]], ids=repr)
def test_a_token_bucket_takes_only_token_counts_from_its_declaration_on(amount: Any) -> None:
    """TB-04: a token bucket's amounts are token counts: None or a string is refused when the
    job declares it (account_for judges what the demand checks cannot), naming both."""
    with pytest.raises(TypeError, match=r"gpt-x: account_for: .* is not a token count"):
        JobRequirements().require_rate_limiter(_bucket(), amount)
    with pytest.raises(TypeError, match="is not a token count"):
        Demand().add(_bucket(), amount)


def test_good_amounts_and_routing_values_are_kept() -> None:
    """DG-01, DG-03: None, zero, whole and fractional numbers (int, float, Decimal, Fraction)
    pass; a value that is not a number is the account's to judge (a gate keeps a routing
    record, as an account that routes amounts must)."""
    bucket, gate = _bucket(), CountingGate("slots", 3)
    good = [0, 5, 2.5, decimal.Decimal("3"), fractions.Fraction(1, 2)]
    demand = Demand()
    for amount in good:
        demand.add(bucket, amount)
    demand.add(gate).add(gate, 0).add(gate, "route-a")
    assert [entry.amounts for entry in demand.entries] == [tuple(good), (None, 0, "route-a")]
    requirements = JobRequirements().require_rate_limiter(bucket, 10).require_rate_limiter(gate)
    assert [need.amount for need in requirements.limiters] == [10, None]
    assert bucket.fits(good, ()) and bucket.try_take(good, ())


async def test_a_negative_amount_never_credits_the_bucket(autojump_clock: trio.abc.Clock) -> None:
    """TB-04, TB-11, ADM-34: the issue's six 1,000-token jobs on a 1,000-per-minute bucket: a
    seventh declaring -1000 is refused at declaration, a negative take or give raises without
    moving the level, and the six are granted one a minute (0, 60, ..., 300 s)."""
    bucket = _bucket(tpm=1000)
    with pytest.raises(ValueError, match=r"'gpt-x' .*got -1000"):
        JobRequirements().require_rate_limiter(bucket, -1000)
    for question in (bucket.fits, bucket.try_take, bucket.earliest_fit):
        with pytest.raises(ValueError, match=r"gpt-x: .*-1000 is not a token count"):
            question([-1000], [])
    with pytest.raises(ValueError, match=r"gpt-x: give: -1000 is not a token count"):
        bucket.give([-1000])
    with pytest.raises(ValueError, match=r"gpt-x: give: nan is not a token count"):
        bucket.give([NAN])
    assert bucket.status().tokens == 1000
    granted: list[float] = []
    async with running() as (admission, nursery):
        start = trio.current_time()

        async def job(name: str) -> None:
            grant = await admission.admit(Demand().add(bucket, 1000), FakeJob(name))
            granted.append(trio.current_time() - start)
            admission.release(grant)

        for i in range(6):
            nursery.start_soon(job, f"j{i}")
        await trio.sleep(1000)
    assert granted == pytest.approx([0, 60, 120, 180, 240, 300])


def test_accounts_refuse_bad_amounts_from_direct_callers() -> None:
    """ACC-14, EW-09: a gate and a window count permits, not values, but a bool, NaN or a
    negative amount is still refused by name, and nothing is taken or given."""

    class Window(ElasticWindow):
        base_window = 1.0
        max_requests = 3

    gate = CountingGate("slots", 2)
    window = Window("win", clock=lambda: 0.0)
    for account in (gate, window):
        name = account.limiter_name
        for question in (account.fits, account.try_take):
            with pytest.raises(ValueError, match=rf"{name}: fits/try_take: nan is not an amount"):
                question([NAN], [])
        with pytest.raises(TypeError, match=rf"{name}: give: True is not an amount"):
            account.give([True])
        assert account.in_use == 0
    assert gate.try_take([None, 1], []) and gate.in_use == 2


HOSTILE = st.one_of(
    st.sampled_from([NAN, INF, -INF, True, False, 1j, decimal.Decimal("sNaN")]),
    st.floats(max_value=-1e-300),
    st.integers(max_value=-1),
    st.floats(min_value=1e300, allow_infinity=True).map(lambda f: -f),
)


@settings(max_examples=200, deadline=None)
@given(amount=HOSTILE, where=st.sampled_from(["fits", "try_take", "give", "earliest_fit"]))
def test_no_account_method_takes_a_hostile_amount(amount: Any, where: str) -> None:
    """TB-04, ACC-14: whatever hostile amount reaches a bucket's or a gate's methods directly
    is refused with an error that shows the value, and the account's level never moves."""
    bucket = TokenBucket("gpt-x", TokenBucketConfig(rpm=100, tpm=1000), clock=lambda: 0.0)
    gate = CountingGate("slots", 2)
    for account in (bucket, gate):
        if where == "earliest_fit" and account is gate:
            continue  # a gate's earliest_fit is always None: nothing to refuse
        method = getattr(account, where)
        args = ([amount],) if where == "give" else ([amount], [])
        with pytest.raises((ValueError, TypeError)) as raised:
            method(*args)
        assert repr(amount) in str(raised.value)
    assert bucket.status().tokens == 1000 and gate.in_use == 0
    with pytest.raises((ValueError, TypeError)):
        Demand().add(bucket, amount)


# --------------------------------------------------------------------------------------------
# Construction: every built-in account refuses a bad capacity or rate by name
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [NAN, INF, -1, 0, 1.5, True, "10", None], ids=repr)
def test_built_in_accounts_refuse_a_bad_capacity_naming_the_parameter(value: Any) -> None:
    """ACC-13, TB-01, EW-02: a gate's capacity, a bucket's rpm and tpm and a window's bounds
    refuse NaN, infinities, non-positive, fractional, bool and non-number values by name."""
    with pytest.raises((TypeError, ValueError), match="capacity"):
        CountingGate("slots", value)
    with pytest.raises((TypeError, ValueError), match="rpm"):
        TokenBucketConfig(rpm=value, tpm=1000)
    with pytest.raises((TypeError, ValueError), match="tpm"):
        TokenBucketConfig(rpm=10, tpm=value)
    with pytest.raises((TypeError, ValueError), match="capacity"):
        CountingGate("slots", 1).set_capacity(value)


@pytest.mark.parametrize("value", [NAN, INF, -1, 0, True, "4"], ids=repr)
def test_the_named_gates_name_their_own_parameter(value: Any) -> None:
    """GATE-01, GATE-04, GATE-07: each named gate refuses a bad size naming the parameter it
    was given as, and the value."""
    builds: list[tuple[Callable[[], object], str]] = [
        (lambda: HttpConnectionGate(value), "pool_size"),
        (lambda: DatabaseGate("orders", value), "max_connections"),
        (lambda: ModelGate("local", value), "max_concurrent"),
        (lambda: StdioEndpointGate("tools", value), "max_concurrent"),
        (lambda: StdioPoolGate(value), "max_concurrent"),
    ]
    for build, parameter in builds:
        with pytest.raises(
            (TypeError, ValueError), match=rf"{parameter}: capacity must .*got {value!r}"
        ):
            build()


@pytest.mark.parametrize(
    "setting",
    [
        "base_window",
        "initial_cooldown",
        "max_cooldown",
        "max_throttle",
        "probe_timeout",
        "throttle_increment",
        "throttle_decrement",
        "recovery_minutes",
        "recovery_multiplier",
    ],
)
@pytest.mark.parametrize("value", [NAN, INF, -INF, "1", True], ids=repr)
def test_a_window_refuses_a_non_finite_or_non_number_setting(setting: str, value: Any) -> None:
    """EW-02: every number a window's throttle and cooldown run on must be finite; NaN or an
    infinity is refused at construction, naming the setting."""
    attributes: dict[str, Any] = {"base_window": 1.0, "max_requests": 3, setting: value}
    bad = type("BadRateLimiter", (ElasticWindow,), attributes)
    with pytest.raises(ValueError, match=setting):
        bad()


def test_a_negative_tuning_knob_is_refused() -> None:
    """EW-02: the knobs that move the throttle must not be negative."""
    for knob in ("throttle_increment", "throttle_decrement", "recovery_minutes"):
        bad = type(
            "BadRateLimiter", (ElasticWindow,), {"base_window": 1, "max_requests": 3, knob: -1}
        )
        with pytest.raises(ValueError, match=rf"{knob} must be >= 0"):
            bad()


def test_backpressure_takes_a_non_negative_count() -> None:
    """TB-14: record_backpressure refuses a NaN, negative or non-int weight by name; an
    upstream failure whose weight is not a non-negative int counts as one 429."""
    bucket = TokenBucket("gpt-x", TokenBucketConfig(rpm=10, tpm=100), clock=lambda: 0.0)
    for weight in (-1, NAN, 1.5, True, "3"):
        with pytest.raises(ValueError, match=r"gpt-x: record_backpressure .*got"):
            bucket.record_backpressure(weight)  # type: ignore[arg-type]
    assert bucket.throttle == 0.0

    class Odd:
        backpressure = -5

    bucket.on_rate_limit_error(Odd())
    assert bucket.throttle == 0.5
