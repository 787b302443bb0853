"""The user-facing pytest plugin (nucleo_trio.testing.pytest_plugin), used the way a user uses it.

pytest 9 refuses ``pytest_plugins`` in a conftest below the root, but still honours it at the top
of a test module, so this module enables the plugin for itself. The plugin's fixture names all
start with ``nucleo_`` or say what they are (``scripted_llm``), so registering it for the
session cannot shadow the suite's own ``dispatcher`` and ``recorder`` fixtures.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import pluggy
import pytest
import trio

from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow
from nucleo_trio.llm import reply
from nucleo_trio.llm.clients import LLMRequest, Message, ScriptExhaustedError
from nucleo_trio.plugins import hookimpl, make_plugin_manager
from nucleo_trio.testing import DEFAULT_SEED, EventRecorder, ScriptedLLMFactory, settle

pytest_plugins = ["pytester", "nucleo_trio.testing.pytest_plugin"]


class Nap(Tool[str]):
    """Sleeps ``seconds`` on the trio clock, then says when it woke."""

    def __init__(self, parent: Identifiable, seconds: float) -> None:
        super().__init__(parent)
        self.seconds = seconds

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(self.seconds)
        return f"woke at {trio.current_time():g}"


async def test_the_dispatcher_fixture_runs_jobs_in_virtual_time(
    nucleo_dispatcher: JobDispatcher,
    nucleo_events: EventRecorder,
    autojump_clock: trio.abc.Clock,
) -> None:
    """A started, seeded dispatcher; under the autojump clock a minute's nap costs no real time
    and the job's events are recorded in order."""
    assert nucleo_dispatcher.is_running
    assert nucleo_dispatcher.config.seed == DEFAULT_SEED
    start = trio.current_time()
    handle = nucleo_dispatcher.submit(Nap(workflow("u", "wf"), 60))
    assert await handle.result() == f"woke at {start + 60:g}"
    await nucleo_events.settle()
    names = nucleo_events.names(handle.job_id)
    assert names[0] == "JobScheduled" and names[-1] == "WorkflowCompleteEvent"
    assert names.index("JobStartedEvent") < names.index("JobCompletedEvent")
    assert [e.snapshot.job_id for e in nucleo_events.typed(ev.JobCompletedEvent) if e.snapshot] == [
        handle.job_id
    ]


async def test_the_fixture_loads_the_built_ins_and_no_entry_points(
    nucleo_dispatcher: JobDispatcher,
) -> None:
    """By default the installed test plugin's fixed_slots kind is not loaded: a test sees the
    same runtime on every machine."""
    assert nucleo_dispatcher.limiter_kinds is not None
    assert "counting" in nucleo_dispatcher.limiter_kinds.kinds
    assert "fixed_slots" not in nucleo_dispatcher.limiter_kinds.kinds


class TestAnOverriddenPluginManager:
    """A class (or module, or conftest) that overrides ``nucleo_plugin_manager`` gets a
    dispatcher built from it."""

    @pytest.fixture
    def nucleo_plugin_manager(self) -> pluggy.PluginManager:
        return make_plugin_manager()

    async def test_entry_points_load_when_asked(self, nucleo_dispatcher: JobDispatcher) -> None:
        """With entry points loaded, the installed test plugin's fixed_slots kind is there."""
        assert nucleo_dispatcher.limiter_kinds is not None
        assert "fixed_slots" in nucleo_dispatcher.limiter_kinds.kinds


class Tickets:
    """A plugin object handed to the fixture: one limiter kind of its own."""

    @hookimpl
    def nucleo_trio_limiter_kinds(self) -> dict[str, Any]:
        return {"tickets": CountingGate}


class TestAnOverriddenConfigAndPlugins:
    """Overriding both fixtures: the plugin's kind builds the configured limiter."""

    @pytest.fixture
    def nucleo_plugin_manager(self) -> pluggy.PluginManager:
        return make_plugin_manager(load_entrypoints=False, plugins=[Tickets()])

    @pytest.fixture
    def nucleo_dispatcher_config(self) -> DispatcherConfig:
        return DispatcherConfig.from_mapping(
            {"seed": 3, "limiters": {"desk": {"kind": "tickets", "settings": {"capacity": 1}}}}
        )

    async def test_the_configured_limiter_admits_one_job_at_a_time(
        self, nucleo_dispatcher: JobDispatcher, autojump_clock: trio.abc.Clock
    ) -> None:
        """The config is used as given (seed 3) and its limiter comes from the plugin."""
        assert nucleo_dispatcher.config.seed == 3
        desk = nucleo_dispatcher.limiters["desk"]
        assert isinstance(desk, CountingGate) and desk.capacity == 1

        class AtTheDesk(Nap):
            def requirements(self) -> JobRequirements:
                return JobRequirements().require_rate_limiter(desk)

        root = workflow("u", "desk")
        first = nucleo_dispatcher.submit(AtTheDesk(root, 10))
        second = nucleo_dispatcher.submit(AtTheDesk(root, 10))
        assert await first.result() == "woke at 10"
        assert await second.result() == "woke at 20"


async def test_scripted_llm_builds_clients_and_keeps_them(
    scripted_llm: ScriptedLLMFactory, autojump_clock: trio.abc.Clock
) -> None:
    """The factory takes the client's own arguments; its clients play their script on the trio
    clock and keep the requests they were sent."""
    client = scripted_llm([reply("hello")], model="fake", latency=2.0)
    request = LLMRequest(messages=[Message.user("hi")], max_tokens=16)
    response = await client.complete(request)
    assert (response.content, response.model) == ("hello", "fake")
    assert trio.current_time() == 2.0
    assert client.requests == [request]
    with pytest.raises(ScriptExhaustedError, match="1 step"):
        await client.complete(request)
    echo = scripted_llm(responder=lambda r: reply(r.messages[-1].content))
    assert (await echo.complete(request)).content == "hi"
    assert scripted_llm.clients == [client, echo]


async def test_settle_lets_the_bus_deliver(nucleo_dispatcher: JobDispatcher) -> None:
    """settle() returns once every task is blocked, so what was published has been delivered."""
    recorder = EventRecorder()
    nucleo_dispatcher.bus.subscribe(recorder)
    nucleo_dispatcher.submit(Nap(workflow("u", "settle"), 0))
    await settle()
    assert recorder.typed(ev.JobCompletedEvent)
    recorder.clear()
    assert len(recorder) == 0


USER_CONFTEST = """
pytest_plugins = ["nucleo_trio.testing.pytest_plugin"]
"""

USER_TESTS = """
import pytest
import trio

from nucleo_trio.dispatch import DispatcherConfig
from nucleo_trio.jobs import JobContext, Tool, workflow

SEEN = []


class Wait(Tool[float]):
    async def execute(self, context: JobContext) -> float:
        await trio.sleep(600)
        return trio.current_time()


async def test_a_user_test(nucleo_dispatcher, nucleo_events, autojump_clock):
    SEEN.append(nucleo_dispatcher)
    handle = nucleo_dispatcher.submit(Wait(workflow("user", "wf")))
    assert await handle.result() == 600
    await nucleo_events.settle()
    assert "JobCompletedEvent" in nucleo_events.names(handle.job_id)


async def test_a_test_may_shut_it_down_itself(nucleo_dispatcher):
    SEEN.append(nucleo_dispatcher)
    await nucleo_dispatcher.shutdown()


def test_the_fixture_shut_every_dispatcher_down():
    assert len(SEEN) == 2
    assert not any(d.is_running for d in SEEN)


async def test_no_entry_points_by_default(nucleo_dispatcher):
    assert "fixed_slots" not in nucleo_dispatcher.limiter_kinds.kinds


@pytest.mark.nucleo_dispatcher(load_entrypoints=True, config=DispatcherConfig(seed=11))
async def test_the_marker_asks_for_another_dispatcher(nucleo_dispatcher):
    assert "fixed_slots" in nucleo_dispatcher.limiter_kinds.kinds
    assert nucleo_dispatcher.config.seed == 11


@pytest.mark.nucleo_dispatcher(retries=3)
async def test_a_misspelt_marker(nucleo_dispatcher):
    pass
"""


def test_a_user_suite_enables_the_plugin_from_its_root_conftest(
    pytester: pytest.Pytester,
) -> None:
    """A user's suite with the plugin in its root conftest and trio_mode on: the fixtures run
    jobs in virtual time, each dispatcher is shut down after its test (or by it), entry points
    load only when the nucleo_dispatcher marker asks, and a misspelt marker option is an error
    that names it and the options there are."""
    pytester.makeini("[pytest]\ntrio_mode = true\naddopts = --strict-markers\n")
    pytester.makeconftest(USER_CONFTEST)
    pytester.makepyfile(test_user=textwrap.dedent(USER_TESTS))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(
        ["*unknown option(s) retries; known: config, load_entrypoints, plugins*"]
    )


FAILING_AND_LEAVING = """
import trio

from nucleo_trio.jobs import JobContext, Tool, workflow


class Nap(Tool[str]):
    timeout = 600.0

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(500)
        return "slept"


async def test_an_assertion_fails(nucleo_dispatcher):
    assert 1 + 1 == 3, "arithmetic"


async def test_a_job_is_left_running(nucleo_dispatcher):
    handle = nucleo_dispatcher.submit(Nap(workflow("u", "left")))
    await trio.sleep(0.05)
    LEFT.append(handle)


LEFT = []


def test_the_left_job_was_cancelled():
    [handle] = LEFT
    assert handle.done and handle.state.value == "CANCELLED"
"""


def test_a_failing_assertion_shows_itself_and_a_job_left_running_ends_at_once(
    pytester: pytest.Pytester,
) -> None:
    """A failed assertion in a test using the fixture dispatcher is reported as the assertion,
    in the long report and in the one-line summary, with no exception group around it; a test
    that leaves a job running on the real clock ends at teardown at once (not after the 30 s
    shutdown), with a warning naming the job, and the job ends cancelled."""
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest(USER_CONFTEST)
    pytester.makepyfile(test_user=textwrap.dedent(FAILING_AND_LEAVING))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-rA")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "ExceptionGroup" not in out and "Exception Group" not in out, out
    result.stdout.fnmatch_lines(
        [
            "E       AssertionError: arithmetic",
            "*LeftRunningWarning: test_user.py::test_a_job_is_left_running ended with 1 job(s)*"
            "Nap (*, RUNNING)*cancelled now*",
            "FAILED test_user.py::test_an_assertion_fails - AssertionError: arithmetic",
        ]
    )
    durations = [float(word) for word in re.findall(r"in ([0-9.]+)s", out)]
    assert durations and durations[-1] < 20, out  # a 30 s wait would show; the bound is loose


OVERRIDES = """
import pytest

from nucleo_trio.dispatch import DispatcherConfig
from nucleo_trio.plugins import hookimpl, make_plugin_manager


class Kinds:
    @hookimpl
    def nucleo_trio_limiter_kinds(self):
        from nucleo_trio.admission import CountingGate
        return {"extra_gate": lambda name, **settings: CountingGate(name, 1)}


@pytest.fixture
def nucleo_dispatcher_config():
    return DispatcherConfig(seed=21)


@pytest.fixture
def nucleo_plugin_manager():
    return make_plugin_manager(load_entrypoints=False)


async def test_the_overridden_config_is_used(nucleo_dispatcher):
    assert nucleo_dispatcher.config.seed == 21


@pytest.mark.nucleo_dispatcher(plugins=[Kinds()])
async def test_the_marker_plugins_join_an_overridden_manager(nucleo_dispatcher):
    assert nucleo_dispatcher.config.seed == 21
    assert "extra_gate" in nucleo_dispatcher.limiter_kinds.kinds


@pytest.mark.nucleo_dispatcher(config=DispatcherConfig(seed=5))
async def test_two_configs_are_an_error(nucleo_dispatcher):
    pass
"""


def test_the_marker_and_overridden_fixtures_work_together_or_say_why_not(
    pytester: pytest.Pytester,
) -> None:
    """Overriding nucleo_dispatcher_config and nucleo_plugin_manager in a conftest or module
    works with the marker: its plugins join the overriding manager; its config beside an
    overridden config fixture is an error naming both, since two configurations cannot merge."""
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest(USER_CONFTEST)
    pytester.makepyfile(test_user=textwrap.dedent(OVERRIDES))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_two_configs_are_an_error: @pytest.mark.nucleo_dispatcher(config=...) and an "
            "overridden nucleo_dispatcher_config fixture, nucleo_dispatcher_config (*test_user.py:*)"
            ", both set the dispatcher's configuration; set it in one of them*"
        ]
    )


async def test_scripted_llm_answers_the_fixture_dispatchers_model_calls(
    nucleo_dispatcher: JobDispatcher, scripted_llm: ScriptedLLMFactory, autojump_clock: Any
) -> None:
    """With scripted_llm beside the fixture dispatcher, an LLMCall submitted to the dispatcher
    is answered by the script: its catalog has an entry per grade on the scripted provider,
    and the request the model saw is kept on the client."""
    from nucleo_trio.llm import Conversation, LLMCall
    from nucleo_trio.models import Grade

    client = scripted_llm([reply("forty-two")])
    conversation = Conversation(system="You answer sums.", output=256, grade=Grade.SMALL)
    conversation.put_objective("what is six times seven?")
    response = await nucleo_dispatcher.submit(LLMCall(workflow("u", "ask"), conversation)).result()
    assert "forty-two" in str(response)
    [request] = client.requests
    assert request.messages[-1].content == "what is six times seven?"
    assert request.model == "scripted-small"


async def test_without_a_script_the_call_fails_saying_what_to_build(
    nucleo_dispatcher: JobDispatcher, scripted_llm: ScriptedLLMFactory, autojump_clock: Any
) -> None:
    """A model call with no scripted client built fails, and the error says what to write."""
    from nucleo_trio.errors import UncorrectableError
    from nucleo_trio.llm import Conversation, LLMCall
    from nucleo_trio.models import Grade

    conversation = Conversation(output=64, grade=Grade.SMALL)
    conversation.put_objective("hi")
    call = LLMCall(workflow("u", "ask"), conversation)
    with pytest.raises(UncorrectableError, match=r"build one with scripted_llm\(\[\.\.\.\]\)"):
        await nucleo_dispatcher.submit(call).result()
