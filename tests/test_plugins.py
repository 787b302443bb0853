"""The plugin mechanism: hook specs, the plugin manager, the limiter registry, entry points.

The third-party path is exercised for real: ``tests/plugin_dist`` is an installed distribution
(``nucleo-trio-testplugin``) found through its ``nucleo_trio`` entry point, and the failure
paths for entry points use real ``.dist-info`` directories put on ``sys.path``.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pluggy
import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    Admission,
    CountingGate,
    Demand,
    Grant,
    RateLimiter,
    Replenishment,
)
from nucleo_trio.heartbeat import HeartbeatJobs
from nucleo_trio.jobs import JobContext, Tool
from nucleo_trio.plugins import (
    PROJECT_NAME,
    DBProviderKinds,
    LimiterFactory,
    LimiterRegistry,
    PluginError,
    UnknownDBProviderKindError,
    UnknownLimiterKindError,
    builtin,
    hookimpl,
    hookspecs,
    make_plugin_manager,
)

ROOT = Path(__file__).resolve().parents[1]
TEST_DISTRIBUTION = "nucleo-trio-testplugin"


def _builtins_only(*plugins: object) -> LimiterRegistry:
    return LimiterRegistry(make_plugin_manager(load_entrypoints=False, plugins=plugins))


def _kinds_plugin(kinds: Any) -> object:
    """A plugin object whose limiter-kinds hook answers ``kinds``."""

    class KindsPlugin:
        @hookimpl
        def nucleo_trio_limiter_kinds(self) -> Any:
            return kinds

    return KindsPlugin()


def _require_test_distribution() -> importlib.metadata.EntryPoint:
    """The test plugin's entry point; FAIL (never skip) when the distribution is missing."""
    found = [
        ep for ep in importlib.metadata.entry_points(group=PROJECT_NAME) if ep.name == "testplugin"
    ]
    if not found:
        pytest.fail(
            f"the test plugin distribution {TEST_DISTRIBUTION!r} (tests/plugin_dist) is not "
            "installed, so its 'nucleo_trio' entry point cannot be loaded. Run the README test "
            "command (.ci/run), or at least: .venv/bin/pip install -e tests/plugin_dist",
            pytrace=False,
        )
    return found[0]


def _exercise_counting(limiter: RateLimiter, capacity: int) -> None:
    """Take every permit, see the next one refused, give one back, take it again."""
    permit = [None]
    for _ in range(capacity):
        assert limiter.try_take(permit, [])
    assert not limiter.fits(permit, [])
    assert not limiter.try_take(permit, [])
    limiter.give(permit)
    assert limiter.fits(permit, [])
    assert limiter.try_take(permit, [])


def _install_fake_distribution(
    site: Path, monkeypatch: pytest.MonkeyPatch, dist: str, module: str, source: str | None
) -> None:
    """Put a real distribution on ``sys.path``: ``.dist-info`` metadata, entry point, module.

    ``source`` is the plugin module's code, or ``None`` to leave the module missing (an entry
    point that cannot be imported).
    """
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PROJECT_NAME}]\n{module} = {module}\n")
    if source is not None:
        (site / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, module, raising=False)


# --- nucleo_trio_limiter_kinds: built-ins -------------------------------------------------------


def test_nucleo_trio_limiter_kinds_builtin_counting_goes_through_the_hook() -> None:
    """The built-in "counting" kind is registered as a plugin through nucleo_trio_limiter_kinds."""
    pm = make_plugin_manager(load_entrypoints=False)
    assert pm.is_registered(builtin)
    providers = [impl.plugin for impl in pm.hook.nucleo_trio_limiter_kinds.get_hookimpls()]
    assert providers == [builtin]
    assert pm.hook.nucleo_trio_limiter_kinds() == [
        {
            "counting": CountingGate,
            "token_bucket": builtin.token_bucket,
            "elastic_window": builtin.elastic_window,
            "rate_limit": builtin.rate_limit,
        }
    ]

    registry = LimiterRegistry(pm)
    assert registry.kinds == ("counting", "elastic_window", "rate_limit", "token_bucket")
    assert "counting" in registry
    assert registry.provider("counting") == "'nucleo_trio.plugins.builtin'"
    gate = registry.create("counting", "render", capacity=3)
    assert isinstance(gate, CountingGate)
    assert isinstance(gate, RateLimiter)
    _exercise_counting(gate, 3)


def test_builtin_kind_refuses_bad_settings_naming_kind_and_plugin() -> None:
    """Bad settings for a built-in kind come back naming the kind, the plugin and the cause."""
    registry = _builtins_only()
    with pytest.raises(
        PluginError, match=r"'counting' from plugin 'nucleo_trio\.plugins\.builtin'"
    ):
        registry.create("counting", "render")  # capacity missing
    with pytest.raises(PluginError, match="capacity") as caught:
        registry.create("counting", "render", capacity=0)
    assert isinstance(caught.value.__cause__, ValueError)


def test_plugin_objects_are_registered_after_the_builtins_in_order() -> None:
    """Extra plugins join after the built-ins, in the order given; kinds come back sorted."""
    first = _kinds_plugin({"zeta": CountingGate})
    second = _kinds_plugin({"alpha": CountingGate})
    pm = make_plugin_manager(load_entrypoints=False, plugins=[first, second])
    providers = [impl.plugin for impl in pm.hook.nucleo_trio_limiter_kinds.get_hookimpls()]
    assert providers == [builtin, first, second]
    assert LimiterRegistry(pm).kinds == (
        "alpha",
        "counting",
        "elastic_window",
        "rate_limit",
        "token_bucket",
        "zeta",
    )


def test_a_plugin_answering_none_contributes_nothing() -> None:
    """A plugin whose hook answers None (or nothing) adds no kinds and is not an error."""
    assert _builtins_only(_kinds_plugin(None), _kinds_plugin({})).kinds == (
        "counting",
        "elastic_window",
        "rate_limit",
        "token_bucket",
    )


# --- nucleo_trio_limiter_kinds: the real entry point --------------------------------------------


def test_nucleo_trio_limiter_kinds_entry_point_loads_the_test_distribution() -> None:
    """The installed test distribution is found through the nucleo_trio entry-point group and
    its "fixed_slots" kind builds a working account."""
    entry_point = _require_test_distribution()
    assert entry_point.value == "nucleo_trio_testplugin"
    assert entry_point.dist is not None
    assert entry_point.dist.metadata["Name"] == TEST_DISTRIBUTION

    pm = make_plugin_manager()
    plugin = pm.get_plugin("testplugin")
    assert plugin is not None
    assert plugin.__name__ == "nucleo_trio_testplugin"
    assert [dist.project_name for p, dist in pm.list_plugin_distinfo() if p is plugin] == [
        TEST_DISTRIBUTION
    ]

    registry = LimiterRegistry(pm)
    assert {"counting", "fixed_slots"} <= set(registry.kinds)
    assert TEST_DISTRIBUTION in registry.provider("fixed_slots")
    slots = registry.create("fixed_slots", "render", slots=2)
    assert isinstance(slots, RateLimiter)
    assert isinstance(slots, plugin.FixedSlots)
    assert slots.limiter_name == "slots:render"
    assert slots.limiter_category == "semaphore"
    assert slots.replenishment() is Replenishment.RELEASE
    _exercise_counting(slots, 2)


async def test_a_plugin_account_joins_admission_like_a_builtin_gate() -> None:
    """GATE-10: a third-party CountingGate subclass, loaded through its entry point, is granted,
    parks a second job holding nothing, hands over at release and comes back at rollback,
    exactly like the built-in counting gate beside it in the same demand."""
    _require_test_distribution()  # before any nursery, so a missing install fails plainly
    registry = LimiterRegistry(make_plugin_manager())
    slots = registry.create("fixed_slots", "render", slots=1)
    db = registry.create("counting", "db", capacity=2)
    admission = Admission()
    granted: list[Grant] = []

    async def second_job() -> None:
        granted.append(await admission.admit(Demand().add(slots).add(db)))

    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        first = await admission.admit(Demand().add(slots).add(db))
        assert (slots.in_use, db.in_use) == (1, 1)

        nursery.start_soon(second_job)
        await trio.testing.wait_all_tasks_blocked()
        assert admission.queue_size == 1
        assert not granted
        assert db.in_use == 1  # parked holding nothing, though the db gate had room

        admission.release(first)
        await trio.testing.wait_all_tasks_blocked()
        assert len(granted) == 1
        assert (slots.in_use, db.in_use) == (1, 1)

        admission.rollback(granted[0])
        assert (slots.in_use, db.in_use) == (0, 0)
        admission.stop()


def test_entry_points_are_skipped_when_asked() -> None:
    """load_entrypoints=False leaves the installed test distribution out."""
    _require_test_distribution()
    pm = make_plugin_manager(load_entrypoints=False)
    assert pm.get_plugin("testplugin") is None
    assert "fixed_slots" not in LimiterRegistry(pm)


def test_an_entry_point_that_cannot_be_imported_is_a_plugin_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry point whose module is missing is refused naming its distribution, the entry
    point and the import error, and only that entry point (not every one installed)."""
    _install_fake_distribution(
        tmp_path, monkeypatch, "nt-broken-plugin", "nt_broken_plugin_module", source=None
    )
    with pytest.raises(PluginError) as caught:
        make_plugin_manager()
    assert str(caught.value) == (
        "the 'nucleo_trio' entry point nt_broken_plugin_module = nt_broken_plugin_module of "
        "distribution nt-broken-plugin 0.1 failed to import: "
        "ModuleNotFoundError: No module named 'nt_broken_plugin_module'"
    )
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_an_entry_point_whose_module_raises_on_import_names_that_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_fake_distribution(
        tmp_path,
        monkeypatch,
        "nt-raising-plugin",
        "nt_raising_plugin_module",
        source="raise RuntimeError('needs FOO_TOKEN')\n",
    )
    with pytest.raises(PluginError) as caught:
        make_plugin_manager()
    message = str(caught.value)
    assert "nt_raising_plugin_module = nt_raising_plugin_module" in message
    assert "distribution nt-raising-plugin 0.1" in message
    assert message.endswith("failed to import: RuntimeError: needs FOO_TOKEN")
    assert "testplugin" not in message


def test_an_entry_point_plugin_with_an_unknown_hook_names_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_pending's refusal of an entry-point plugin names the plugin and its distribution."""
    _install_fake_distribution(
        tmp_path,
        monkeypatch,
        "nt-typo-plugin",
        "nt_typo_plugin_module",
        source="""
            from nucleo_trio.plugins import hookimpl

            @hookimpl
            def nucleo_trio_limiter_kind():
                return {}
        """,
    )
    with pytest.raises(PluginError) as caught:
        make_plugin_manager()
    message = str(caught.value)
    assert "'nt_typo_plugin_module' (distribution nt-typo-plugin 0.1)" in message
    assert "'nucleo_trio_limiter_kind'" in message


def test_an_entry_point_plugin_with_a_mismatched_hook_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry-point plugin whose hook asks for arguments the spec lacks is refused by name."""
    _install_fake_distribution(
        tmp_path,
        monkeypatch,
        "nt-greedy-plugin",
        "nt_greedy_plugin_module",
        source="""
            from nucleo_trio.plugins import hookimpl

            @hookimpl
            def nucleo_trio_limiter_kinds(config):
                return {}
        """,
    )
    with pytest.raises(PluginError, match="entry-point plugin 'nt_greedy_plugin_module'") as caught:
        make_plugin_manager()
    assert "config" in str(caught.value)
    assert isinstance(caught.value.__cause__, pluggy.PluginValidationError)


# --- the plugin manager refuses broken plugins ---------------------------------------------------


def test_check_pending_refuses_an_unknown_hook_naming_plugin_and_hook() -> None:
    """A decorated function matching no hook spec is refused at start, with a suggestion."""

    class Typo:
        @hookimpl
        def nucleo_trio_limiter_kind(self) -> Mapping[str, LimiterFactory]:
            return {}

    with pytest.raises(PluginError) as caught:
        make_plugin_manager(load_entrypoints=False, plugins=[Typo()])
    message = str(caught.value)
    assert "Typo instance" in message
    assert "'nucleo_trio_limiter_kind'" in message
    assert "did you mean 'nucleo_trio_limiter_kinds'?" in message
    known = message.split("Known hooks: ", 1)[1].split(", ")
    assert "nucleo_trio_limiter_kinds" in known and known == sorted(known)
    assert isinstance(caught.value.__cause__, pluggy.PluginValidationError)


def test_check_pending_accepts_an_optional_unknown_hook() -> None:
    """An implementation marked optionalhook=True may target a hook this version lacks."""

    class Forward:
        @hookimpl(optionalhook=True)
        def nucleo_trio_some_future_hook(self) -> None:
            return None

    pm = make_plugin_manager(load_entrypoints=False, plugins=[Forward()])
    assert pm.is_registered(next(p for p in pm.get_plugins() if isinstance(p, Forward)))


def test_a_hook_taking_arguments_its_spec_lacks_is_refused() -> None:
    """An implementation asking for an argument the spec does not pass is refused by name."""

    class Greedy:
        @hookimpl
        def nucleo_trio_limiter_kinds(self, config: object) -> Mapping[str, LimiterFactory]:
            return {}

    with pytest.raises(PluginError, match=r"Greedy instance.*nucleo_trio_limiter_kinds") as caught:
        make_plugin_manager(load_entrypoints=False, plugins=[Greedy()])
    assert "config" in str(caught.value)
    assert isinstance(caught.value.__cause__, pluggy.PluginValidationError)


def test_registering_a_plugin_twice_is_refused() -> None:
    """The same plugin passed twice (or the built-ins passed again) is a clear error."""
    plugin = _kinds_plugin({"mine": CountingGate})
    with pytest.raises(PluginError, match="KindsPlugin instance' cannot be registered"):
        make_plugin_manager(load_entrypoints=False, plugins=[plugin, plugin])
    with pytest.raises(PluginError, match=r"'nucleo_trio\.plugins\.builtin' cannot be registered"):
        make_plugin_manager(load_entrypoints=False, plugins=[builtin])


# --- the registry refuses broken answers ---------------------------------------------------------


def test_a_duplicate_kind_is_refused_naming_both_plugins() -> None:
    """Two plugins claiming one kind are refused, naming both; built-ins are not shadowed."""

    class Shadow:
        @hookimpl
        def nucleo_trio_limiter_kinds(self) -> Mapping[str, LimiterFactory]:
            return {"counting": CountingGate}

    pm = make_plugin_manager(load_entrypoints=False, plugins=[Shadow()])
    with pytest.raises(PluginError) as caught:
        LimiterRegistry(pm)
    message = str(caught.value)
    assert "limiter kind 'counting' is provided by two plugins" in message
    assert "'nucleo_trio.plugins.builtin'" in message
    assert "Shadow instance" in message


def test_two_third_party_plugins_claiming_one_kind_are_refused() -> None:
    """The clash check does not depend on the built-ins: any two claimants are refused."""
    with pytest.raises(PluginError, match="'render' is provided by two plugins"):
        _builtins_only(
            _kinds_plugin({"render": CountingGate}), _kinds_plugin({"render": CountingGate})
        )


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (["counting"], "answered nucleo_trio_limiter_kinds with list, expected a mapping"),
        ({"": CountingGate}, "limiter kind name '', expected a non-empty string"),
        ({7: CountingGate}, "limiter kind name 7, expected a non-empty string"),
        ({"broken": "not callable"}, "limiter kind 'broken' -> 'not callable'"),
    ],
)
def test_a_malformed_answer_is_refused_naming_the_plugin(answer: Any, fragment: str) -> None:
    """A hook answer that is not {non-empty name: callable} is refused naming its plugin."""
    pm = make_plugin_manager(load_entrypoints=False, plugins=[_kinds_plugin(answer)])
    with pytest.raises(PluginError, match="KindsPlugin instance") as caught:
        LimiterRegistry(pm)
    assert fragment in str(caught.value)


def test_a_hook_that_raises_is_refused_naming_the_plugin() -> None:
    """A plugin whose hook raises is reported by name, with the failure as the cause."""

    class Exploding:
        @hookimpl
        def nucleo_trio_limiter_kinds(self) -> Mapping[str, LimiterFactory]:
            raise ImportError("optional dependency 'redis' is missing")

    pm = make_plugin_manager(load_entrypoints=False, plugins=[Exploding()])
    with pytest.raises(PluginError, match=r"Exploding instance.*failed answering") as caught:
        LimiterRegistry(pm)
    assert isinstance(caught.value.__cause__, ImportError)


def test_a_factory_that_raises_is_refused_naming_kind_and_plugin() -> None:
    """A factory failure names the kind, the plugin and the account; the cause is chained."""

    def exploding(name: str, **settings: Any) -> RateLimiter:
        raise RuntimeError("backend unreachable")

    registry = _builtins_only(_kinds_plugin({"exploding": exploding}))
    with pytest.raises(PluginError) as caught:
        registry.create("exploding", "db", url="redis://x")
    message = str(caught.value)
    assert "limiter kind 'exploding' from plugin" in message
    assert "KindsPlugin instance" in message
    assert "could not build 'db'" in message
    assert "RuntimeError: backend unreachable" in message
    assert "redis://x" not in message  # settings may hold secrets: only their keys are shown
    assert "(settings given: url)" in message
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_factory_returning_a_non_limiter_is_refused_naming_kind_and_plugin() -> None:
    """A factory whose product does not satisfy the RateLimiter protocol is refused."""
    bogus: Callable[..., object] = lambda name, **settings: {"name": name}  # noqa: E731
    registry = _builtins_only(_kinds_plugin({"bogus": bogus}))
    with pytest.raises(PluginError) as caught:
        registry.create("bogus", "db")
    message = str(caught.value)
    assert "limiter kind 'bogus' from plugin" in message
    assert "KindsPlugin instance" in message
    assert "built 'db' as a dict" in message
    assert "RateLimiter protocol" in message


def test_an_unknown_kind_names_itself_and_the_known_kinds() -> None:
    """Asking for a kind nobody provides lists the known kinds."""
    registry = _builtins_only(_kinds_plugin({"fixed": CountingGate}))
    with pytest.raises(UnknownLimiterKindError) as caught:
        registry.create("conting", "db", capacity=1)
    message = str(caught.value)
    assert "unknown limiter kind 'conting'" in message
    assert (
        "known kinds: 'counting', 'elastic_window', 'fixed', 'rate_limit', 'token_bucket'"
        in message
    )
    assert isinstance(caught.value, LookupError)
    with pytest.raises(UnknownLimiterKindError, match="unknown limiter kind"):
        registry.provider("conting")


def test_an_account_needs_a_non_empty_name() -> None:
    """An empty or non-string account name is refused before the factory runs."""
    registry = _builtins_only()
    with pytest.raises(ValueError, match="non-empty string name, got ''"):
        registry.create("counting", "", capacity=1)
    with pytest.raises(ValueError, match="got 3"):
        registry.create("counting", 3, capacity=1)  # type: ignore[arg-type]


# --- nucleo_trio_db_provider_kinds: database provider kinds ---------------------------------------

POSTGRES_DISTRIBUTION = "nucleo-trio-postgres"


def _db_kinds_plugin(kinds: Any) -> object:
    """A plugin object whose database-provider-kinds hook answers ``kinds``."""

    class DBKindsPlugin:
        @hookimpl
        def nucleo_trio_db_provider_kinds(self) -> Any:
            return kinds

    return DBKindsPlugin()


def test_nucleo_trio_db_provider_kinds_builtins_build_sqlite_and_counting(tmp_path: Path) -> None:
    """The built-in kinds go through the hook: sqlite and counting, each on db:<name>."""
    from nucleo_trio.resources import CountingDBResourceProvider, SQLiteProvider

    kinds = DBProviderKinds(make_plugin_manager(load_entrypoints=False))
    assert kinds.kinds == ("counting", "sqlite")
    assert kinds.provider("sqlite") == repr(builtin.__name__)
    notes = kinds.create("sqlite", "notes", path=str(tmp_path / "n.db"), max_connections=3)
    assert isinstance(notes, SQLiteProvider) and notes.name == "notes"
    assert (notes.admission().limiter_name, notes.admission().capacity) == ("db:notes", 3)
    counted = kinds.create("counting", "reports", max_concurrent=5)
    assert isinstance(counted, CountingDBResourceProvider)
    assert counted.admission().capacity == 5


def test_nucleo_trio_db_provider_kinds_entry_point_loads_the_postgres_distribution() -> None:
    """The PostgreSQL plugin is found through its entry point; FAIL (never skip) when the
    distribution is missing."""
    entry = [
        ep for ep in importlib.metadata.entry_points(group=PROJECT_NAME) if ep.name == "postgres"
    ]
    if not entry:
        pytest.fail(
            f"the distribution {POSTGRES_DISTRIBUTION!r} (plugins/nucleo-trio-postgres) is not "
            "installed, so the 'postgres' database kind is unknown. Run the README test command "
            "(.ci/run), or at least: .venv/bin/pip install -e plugins/nucleo-trio-postgres",
            pytrace=False,
        )
    from nucleo_trio_postgres import PostgresProvider

    kinds = DBProviderKinds(make_plugin_manager())
    assert "postgres" in kinds and POSTGRES_DISTRIBUTION in kinds.provider("postgres")
    provider = kinds.create("postgres", "orders", conninfo="dbname=orders", max_connections=4)
    assert isinstance(provider, PostgresProvider)
    assert (provider.admission().limiter_name, provider.admission().capacity) == ("db:orders", 4)


def test_a_database_kind_claimed_twice_is_refused_naming_both_plugins() -> None:
    def factory(name: str, **settings: Any) -> Any:
        raise AssertionError("never built")  # pragma: no cover

    plugin = _db_kinds_plugin({"sqlite": factory})
    with pytest.raises(PluginError, match="'sqlite' is provided by two plugins") as caught:
        DBProviderKinds(make_plugin_manager(load_entrypoints=False, plugins=[plugin]))
    assert builtin.__name__ in str(caught.value) and "DBKindsPlugin" in str(caught.value)


def test_an_unknown_database_kind_names_the_known_kinds() -> None:
    kinds = DBProviderKinds(make_plugin_manager(load_entrypoints=False))
    with pytest.raises(UnknownDBProviderKindError, match="'mysql'.*'counting', 'sqlite'"):
        kinds.create("mysql", "orders")


def test_a_database_factory_failure_names_kind_and_plugin_but_no_setting_values() -> None:
    """A factory that raises, returns a non-provider, or names the provider otherwise is
    refused naming the kind and plugin; setting values (a conninfo may hold a password) are
    never repeated."""
    from nucleo_trio.resources import CountingDBResourceProvider

    def refuses(name: str, **settings: Any) -> Any:
        raise ValueError("cannot reach the host")

    plugin = _db_kinds_plugin(
        {
            "refuses": refuses,
            "not_a_provider": lambda name, **settings: object(),
            "renames": lambda name, **settings: CountingDBResourceProvider("other", 1),
        }
    )
    kinds = DBProviderKinds(make_plugin_manager(load_entrypoints=False, plugins=[plugin]))
    with pytest.raises(PluginError, match="'refuses'.*DBKindsPlugin.*cannot reach") as caught:
        kinds.create("refuses", "orders", conninfo="password=hunter2")
    assert "hunter2" not in str(caught.value) and "conninfo" in str(caught.value)
    with pytest.raises(PluginError, match="DBResourceProvider protocol"):
        kinds.create("not_a_provider", "orders")
    with pytest.raises(PluginError, match="under the name 'other'"):
        kinds.create("renames", "orders")
    with pytest.raises(ValueError, match="non-empty string name"):
        kinds.create("renames", "")


# --- nucleo_trio_model_provider_kinds ------------------------------------------------------------


def _model_kinds_plugin(kinds: Any) -> object:
    """A plugin object whose model-provider-kinds hook answers ``kinds``."""

    class ModelKindsPlugin:
        @hookimpl
        def nucleo_trio_model_provider_kinds(self) -> Any:
            return kinds

    return ModelKindsPlugin()


def test_nucleo_trio_model_provider_kinds_builtin_and_a_plugins_own() -> None:
    """The built-in kind and a plugin's build a Provider for the key they are given; a kind
    claimed twice names both plugins; an unknown kind names the known ones; a factory that
    raises, builds no Provider or builds one for another key is refused naming the kind."""
    from nucleo_trio.models import Provider
    from nucleo_trio.plugins import ModelProviderKinds, UnknownModelProviderKindError

    kinds = ModelProviderKinds(make_plugin_manager(load_entrypoints=False))
    assert kinds.kinds == ("openai_compatible",)
    local = kinds.create("openai_compatible", "local", base_url="http://127.0.0.1:9/v1")
    assert isinstance(local, Provider) and local.key == "local" and local.close is not None

    def refuses(key: str, **settings: Any) -> Any:
        raise ValueError("no such endpoint")

    plugin = _model_kinds_plugin(
        {
            "acme": lambda key, **settings: Provider(key, credential=settings.get("credential")),
            "refuses": refuses,
            "not_a_provider": lambda key, **settings: object(),
            "rekeys": lambda key, **settings: Provider("other"),
        }
    )
    kinds = ModelProviderKinds(make_plugin_manager(load_entrypoints=False, plugins=[plugin]))
    assert kinds.create("acme", "acme", credential="ACME_KEY").credential == "ACME_KEY"
    assert "ModelKindsPlugin" in kinds.provider("acme")
    with pytest.raises(UnknownModelProviderKindError, match="'acmee'.*did you mean 'acme'"):
        kinds.create("acmee", "acme")
    with pytest.raises(PluginError, match="'refuses'.*ModelKindsPlugin.*no such endpoint") as e:
        kinds.create("refuses", "acme", api_key="sk-secret")
    assert "sk-secret" not in str(e.value) and "api_key" in str(e.value)
    with pytest.raises(PluginError, match="is not a Provider"):
        kinds.create("not_a_provider", "acme")
    with pytest.raises(PluginError, match="under the key 'other'"):
        kinds.create("rekeys", "acme")
    with pytest.raises(ValueError, match="non-empty string key"):
        kinds.create("acme", "")
    twice = _model_kinds_plugin({"openai_compatible": refuses})
    with pytest.raises(PluginError, match="'openai_compatible' is provided by two plugins"):
        ModelProviderKinds(make_plugin_manager(load_entrypoints=False, plugins=[twice]))


async def test_nucleo_trio_model_provider_kinds_configured_providers_are_registered_and_closed() -> (
    None
):
    """A dispatcher builds each provider its ``model_providers`` table names, registers it on
    its models under the key, and awaits its close when it stops; a bad one refuses the start
    naming the key and the kind."""
    from nucleo_trio.dispatch import DispatcherConfig, ModelProviderConfig, open_dispatcher
    from nucleo_trio.errors import ConfigError
    from nucleo_trio.models import Provider

    closed: list[str] = []

    def acme(key: str, *, region: str) -> Provider:
        async def close() -> None:
            closed.append(f"{key}@{region}")

        return Provider(key, close=close)

    plugin = _model_kinds_plugin({"acme": acme})
    config = DispatcherConfig.from_mapping(
        {"model_providers": {"acme-eu": {"kind": "acme", "settings": {"region": "eu"}}}}
    )
    assert config.model_providers == {
        "acme-eu": ModelProviderConfig(kind="acme", settings={"region": "eu"})
    }
    manager = make_plugin_manager(load_entrypoints=False, plugins=[plugin])
    async with open_dispatcher(config, plugin_manager=manager) as dispatcher:
        assert dispatcher.models.providers.keys == ("acme-eu",)
        assert closed == []
    assert closed == ["acme-eu@eu"]
    bad = DispatcherConfig(model_providers={"x": ModelProviderConfig(kind="acme")})
    manager = make_plugin_manager(load_entrypoints=False, plugins=[plugin])
    with pytest.raises(ConfigError, match="model provider 'x' \\(kind 'acme'\\)"):
        async with open_dispatcher(bad, plugin_manager=manager):
            pass  # pragma: no cover


# --- every hook is tested and documented ---------------------------------------------------------


def _hook_names() -> list[str]:
    spec_marker = f"{PROJECT_NAME}_spec"
    return sorted(
        name
        for name, value in vars(hookspecs).items()
        if inspect.isfunction(value) and hasattr(value, spec_marker)
    )


def test_hookspecs_declare_hooks_with_contracts() -> None:
    """Every hook spec is a typed stub with a docstring saying when it runs and what it returns."""
    names = _hook_names()
    assert "nucleo_trio_limiter_kinds" in names
    for name in names:
        stub = getattr(hookspecs, name)
        assert name.startswith(f"{PROJECT_NAME}_"), name
        assert inspect.getdoc(stub), f"hook {name} has no docstring"
        assert inspect.signature(stub).return_annotation is not inspect.Signature.empty, name
        assert name in hookspecs.__all__, f"hook {name} is missing from hookspecs.__all__"


def test_every_hook_has_a_test() -> None:
    """Each hook in hookspecs is exercised by some other test in this file."""
    module = sys.modules[__name__]
    checkers = {"test_every_hook_has_a_test", "test_every_hook_is_documented"}
    sources = [
        inspect.getsource(function)
        for name, function in vars(module).items()
        if name.startswith("test_") and name not in checkers and inspect.isfunction(function)
    ]
    untested = [hook for hook in _hook_names() if not any(hook in source for source in sources)]
    assert not untested, f"hooks with no test in {Path(__file__).name}: {untested}"


def test_every_hook_is_documented() -> None:
    """Each hook in hookspecs has an entry in docs/plugins.md."""
    docs = ROOT / "docs" / "plugins.md"
    assert docs.is_file(), f"{docs} is missing"
    text = docs.read_text()
    undocumented = [hook for hook in _hook_names() if f"`{hook}(" not in text]
    assert not undocumented, f"hooks with no entry in docs/plugins.md: {undocumented}"


# --- nucleo_trio_guardrails -------------------------------------------------------------------------


def test_nucleo_trio_guardrails_registers_the_shipped_guards_and_a_plugins_own() -> None:
    """The shipped guards register by name through nucleo_trio_guardrails like any plugin's; a
    name claimed twice is refused naming both plugins; a factory that builds something other
    than a guard is refused naming the guardrail and the plugin."""
    from nucleo_trio.guardrails import ContentGuardrail, Guardrail, PayloadSizeCapGuardrail
    from nucleo_trio.jobs import workflow
    from nucleo_trio.plugins.manager import GuardrailKinds

    class NoShouting(ContentGuardrail):
        async def validate(self, target: Any) -> None:
            return None

    class GuardPlugin:
        @hookimpl
        def nucleo_trio_guardrails(self) -> Mapping[str, Any]:
            return {"no_shouting": NoShouting, "not_a_guard": lambda parent: object()}

    pm = make_plugin_manager(load_entrypoints=False, plugins=[GuardPlugin()])
    providers = [impl.plugin for impl in pm.hook.nucleo_trio_guardrails.get_hookimpls()]
    assert providers[0] is builtin
    kinds = GuardrailKinds(pm)
    assert {"payload_size_cap", "pii_detection", "url", "no_shouting"} <= set(kinds.kinds)
    assert kinds.provider("payload_size_cap") == "'nucleo_trio.plugins.builtin'"
    root = workflow("u", "wf")
    assert isinstance(kinds.create("payload_size_cap", root, max_chars=5), PayloadSizeCapGuardrail)
    assert isinstance(kinds.create("no_shouting", root), Guardrail)
    with pytest.raises(PluginError, match="'not_a_guard' from plugin .* not a Guardrail"):
        kinds.create("not_a_guard", root)
    with pytest.raises(PluginError, match=r"'payload_size_cap' .* could not build its guard"):
        kinds.create("payload_size_cap", root)

    class Clash:
        @hookimpl
        def nucleo_trio_guardrails(self) -> Mapping[str, Any]:
            return {"url": NoShouting}

    clashing = make_plugin_manager(load_entrypoints=False, plugins=[Clash()])
    with pytest.raises(PluginError, match="'url' is provided by two plugins"):
        GuardrailKinds(clashing)


def test_the_memory_reader_hook_is_a_provider_answered_last_by_the_builtin() -> None:
    """nucleo_trio_memory_reader is firstresult: a plugin's reader wins over the built-in, which
    answers last (trylast) with a ProcessMemoryReader against the configured limit."""
    from nucleo_trio.admission import MemoryReading, ProcessMemoryReader

    class FixedReader:
        def read(self) -> MemoryReading:
            return MemoryReading(1, 2)

    class ReaderPlugin:
        @hookimpl
        def nucleo_trio_memory_reader(self, limit_bytes: int | None) -> Any:
            return FixedReader()

    alone = make_plugin_manager(load_entrypoints=False)
    reader = alone.hook.nucleo_trio_memory_reader(limit_bytes=1 << 30)
    assert isinstance(reader, ProcessMemoryReader) and reader.limit_bytes <= 1 << 30
    plugged = make_plugin_manager(load_entrypoints=False, plugins=[ReaderPlugin()])
    assert isinstance(plugged.hook.nucleo_trio_memory_reader(limit_bytes=None), FixedReader)


# --- nucleo_trio_model_catalog ---------------------------------------------------------------------


def test_nucleo_trio_model_catalog_fragments_merge_and_a_named_file_wins(
    tmp_path: Path,
) -> None:
    """MOD-05: with no catalog file named, every plugin's fragment through
    nucleo_trio_model_catalog is merged; a fragment declaring pins or an id another fragment
    declared is refused naming the plugin; a named file is the whole catalog."""
    from nucleo_trio.errors import ConfigError
    from nucleo_trio.models import load_catalog

    def fragment(spec_id: str, **extra: Any) -> Mapping[str, Any]:
        entry = {
            "id": spec_id,
            "grade": "SMALL",
            "provider_key": "acme",
            "max_context_tokens": 8000,
            "max_output_tokens": 1000,
        }
        return {"models": [entry], **extra}

    class First:
        @hookimpl
        def nucleo_trio_model_catalog(self) -> Mapping[str, Any]:
            return fragment("acme-a")

    class Second:
        @hookimpl
        def nucleo_trio_model_catalog(self) -> Mapping[str, Any]:
            return fragment("acme-b")

    class Silent:
        @hookimpl
        def nucleo_trio_model_catalog(self) -> None:
            return None

    pm = make_plugin_manager(load_entrypoints=False, plugins=[First(), Second(), Silent()])
    catalog = load_catalog(plugins=pm, environ={})
    assert [e.id for e in catalog] == ["acme-a", "acme-b"]

    class Twice:
        @hookimpl
        def nucleo_trio_model_catalog(self) -> Mapping[str, Any]:
            return fragment("acme-a")

    clash = make_plugin_manager(load_entrypoints=False, plugins=[First(), Twice()])
    with pytest.raises(ConfigError, match="'acme-a' is declared by two catalog fragments"):
        load_catalog(plugins=clash, environ={})

    class Pinning:
        @hookimpl
        def nucleo_trio_model_catalog(self) -> Mapping[str, Any]:
            return fragment("acme-c", pins={"SMALL": ["acme-c"]})

    pinning = make_plugin_manager(load_entrypoints=False, plugins=[Pinning()])
    with pytest.raises(ConfigError, match="Pinning.* may not declare pins"):
        load_catalog(plugins=pinning, environ={})

    named = tmp_path / "models.json"
    named.write_text('{"models": []}')
    assert len(load_catalog(plugins=pm, environ={"NUCLEO_TRIO_MODELS": str(named)})) == 0
    with pytest.raises(ConfigError, match="no model catalog"):
        load_catalog(plugins=make_plugin_manager(load_entrypoints=False), environ={})


# --- nucleo_trio_heartbeat_jobs --------------------------------------------------------------------


class Checkin(Tool[str]):
    """A job class a plugin names for heartbeats, under a name of its own."""

    async def execute(self, context: JobContext) -> str:
        CHECKINS.append(context.user_id)
        return "checked in"


CHECKINS: list[str] = []


class Other(Tool[str]):
    """Another job class, which a second plugin would give the same name."""

    async def execute(self, context: JobContext) -> str:
        return "other"


class CheckinJobs:
    @hookimpl
    def nucleo_trio_heartbeat_jobs(self) -> Any:
        return {"ops.checkin": Checkin}


async def test_nucleo_trio_heartbeat_jobs_names_the_classes_a_stored_row_may_run(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """nucleo_trio_heartbeat_jobs registers job classes by name before the Heart fires: a slot
    a durable store held over a restart runs in a dispatcher that never scheduled the class,
    because a plugin named it. Two plugins giving one name, an answer that is not a job class,
    and a name the dispatcher's own heartbeat_jobs give another class are each refused at start
    naming the plugin."""
    from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
    from nucleo_trio.heartbeat import ScheduleHeartbeat, heartbeat_now
    from nucleo_trio.plugins.manager import heartbeat_jobs_from

    CHECKINS.clear()
    config = DispatcherConfig(
        heartbeat=HeartbeatConfig(
            kind="sqlite",
            settings={"path": str(tmp_path / "beats.db")},
            signing_key="a test key, never a real one",
        )
    )
    plugged = make_plugin_manager(load_entrypoints=False, plugins=[CheckinJobs()])
    async with open_dispatcher(config, plugin_manager=plugged) as first:
        assert first.heartbeat_jobs.get("ops.checkin") is Checkin
        first.schedule_heartbeat(ScheduleHeartbeat(Checkin, "checkin", heartbeat_now() + 60), "ops")
        await trio.sleep(1)  # stored, not due
    again = make_plugin_manager(load_entrypoints=False, plugins=[CheckinJobs()])
    async with open_dispatcher(config, plugin_manager=again) as second:
        await trio.sleep(120)
        assert second.heart is not None and await second.heart.store.inspect() == ()
    assert CHECKINS == ["ops"]

    class SameName:
        @hookimpl
        def nucleo_trio_heartbeat_jobs(self) -> Any:
            return {"ops.checkin": Other}

    class NotAJob:
        @hookimpl
        def nucleo_trio_heartbeat_jobs(self) -> Any:
            return {"ops.odd": "billing.jobs:CloseBooks"}

    twice = make_plugin_manager(load_entrypoints=False, plugins=[CheckinJobs(), SameName()])
    with pytest.raises(PluginError, match="'ops.checkin' is provided by two plugins"):
        heartbeat_jobs_from(twice, HeartbeatJobs())
    odd = make_plugin_manager(load_entrypoints=False, plugins=[NotAJob()])
    with pytest.raises(PluginError, match=r"NotAJob.*'ops.odd'.*not a valid heartbeat job"):
        async with open_dispatcher(plugin_manager=odd):
            pass  # pragma: no cover - the start is refused
    taken = make_plugin_manager(load_entrypoints=False, plugins=[CheckinJobs()])
    with pytest.raises(PluginError, match=r"CheckinJobs.*'ops.checkin'.*taken by"):
        async with open_dispatcher(plugin_manager=taken, heartbeat_jobs={"ops.checkin": Other}):
            pass  # pragma: no cover - the start is refused


# --- nucleo_trio_heartbeat_store -------------------------------------------------------------------


def test_the_heartbeat_store_hook_is_a_provider_answered_last_by_the_builtin(
    tmp_path: Path,
) -> None:
    """nucleo_trio_heartbeat_store is firstresult: the built-in answers last for "memory" and
    "sqlite" and None for any other kind, a plugin answers first for a kind of its own, and
    heartbeat_store_from turns an unanswered kind or refused settings into a ConfigError."""
    from nucleo_trio.dispatch import HeartbeatConfig
    from nucleo_trio.errors import ConfigError
    from nucleo_trio.heartbeat import (
        InMemoryHeartbeatStore,
        SQLiteHeartbeatStore,
        heartbeat_store_from,
    )

    alone = make_plugin_manager(load_entrypoints=False)
    hook = alone.hook.nucleo_trio_heartbeat_store
    assert isinstance(hook(kind="memory", settings={}), InMemoryHeartbeatStore)
    path = tmp_path / "beats.db"
    durable = hook(kind="sqlite", settings={"path": str(path)})
    assert isinstance(durable, SQLiteHeartbeatStore) and path.is_file()
    trio.run(durable.aclose)
    assert hook(kind="redis", settings={}) is None

    class RedisLike(InMemoryHeartbeatStore):
        pass

    class StorePlugin:
        @hookimpl
        def nucleo_trio_heartbeat_store(self, kind: str, settings: Mapping[str, Any]) -> Any:
            return RedisLike() if kind == "redis" else None

    plugged = make_plugin_manager(load_entrypoints=False, plugins=[StorePlugin()])
    assert isinstance(heartbeat_store_from(plugged, HeartbeatConfig(kind="redis")), RedisLike)
    assert type(heartbeat_store_from(plugged, HeartbeatConfig())) is InMemoryHeartbeatStore
    with pytest.raises(ConfigError, match="no plugin provides the heartbeat store kind 'redis'"):
        heartbeat_store_from(alone, HeartbeatConfig(kind="redis"))
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['path'\]; known: none"):
        heartbeat_store_from(alone, HeartbeatConfig(settings={"path": "x"}))
    with pytest.raises(ConfigError, match="'sqlite' needs the setting 'path'"):
        heartbeat_store_from(alone, HeartbeatConfig(kind="sqlite"))

    class Broken:
        @hookimpl
        def nucleo_trio_heartbeat_store(self, kind: str) -> Any:
            return object()

    broken = make_plugin_manager(load_entrypoints=False, plugins=[Broken()])
    with pytest.raises(PluginError, match="is not a HeartbeatStore"):
        heartbeat_store_from(broken, HeartbeatConfig())


# --- nucleo_trio_observers ------------------------------------------------------------------------


async def test_nucleo_trio_observers_subscribe_each_answer_to_the_dispatchers_bus() -> None:
    """nucleo_trio_observers fans out: every plugin's observers are subscribed to the bus of the
    dispatcher the hook is called with, before the dispatcher starts, and hear its events; a
    plugin answering None adds nothing; a hook that raises or answers something that is not an
    observer refuses the start naming the plugin."""
    from nucleo_trio.bus import JobEvent, JobObserver, JobStartedEvent
    from nucleo_trio.dispatch import JobDispatcher, open_dispatcher
    from nucleo_trio.jobs import workflow
    from nucleo_trio.plugins import observers_from

    from .jobs_for_tests import Echo

    heard: list[tuple[str, str]] = []

    class Starts(JobObserver[JobEvent]):
        @property
        def predicate(self) -> Callable[[JobEvent], bool]:
            return lambda event: isinstance(event, JobStartedEvent)

        async def on_event(self, event: JobEvent) -> None:
            heard.append(("starts", type(event).__name__))

    seen: list[object] = []

    class ObserverPlugin:
        @hookimpl
        def nucleo_trio_observers(self, dispatcher: JobDispatcher) -> Any:
            seen.append(dispatcher)
            return [Starts(), lambda event: heard.append(("all", type(event).__name__))]

    class Silent:
        @hookimpl
        def nucleo_trio_observers(self) -> None:
            return None

    pm = make_plugin_manager(load_entrypoints=False, plugins=[ObserverPlugin(), Silent()])
    async with open_dispatcher(plugin_manager=pm) as dispatcher:
        assert seen == [dispatcher]
        assert await dispatcher.submit(Echo(workflow("u", "wf"), 3)).result() == 3
    assert ("starts", "JobStartedEvent") in heard
    assert ("all", "JobCompletedEvent") in heard
    assert [kind for kind, _ in heard].count("starts") == 1

    class Raises:
        @hookimpl
        def nucleo_trio_observers(self) -> Any:
            raise RuntimeError("no exporter")

    class NotAnObserver:
        @hookimpl
        def nucleo_trio_observers(self) -> Any:
            return [42]

    for plugin, message in ((Raises(), "no exporter"), (NotAnObserver(), "neither a JobObserver")):
        broken = make_plugin_manager(load_entrypoints=False, plugins=[plugin])
        with pytest.raises(PluginError, match=rf"plugin .*{type(plugin).__name__}.*{message}"):
            observers_from(broken, object())
        with pytest.raises(PluginError, match=message):
            async with open_dispatcher(plugin_manager=broken):
                pass  # pragma: no cover - the start is refused


# --- nucleo_trio_mcp_servers ------------------------------------------------------------------------


async def test_nucleo_trio_mcp_servers_gives_a_dispatcher_the_servers_its_mcp_table_declares() -> (
    None
):
    """A dispatcher whose config has an mcp table asks nucleo_trio_mcp_servers once, with
    itself and the table as written: the first answer is dispatcher.mcp and stops with the
    dispatcher. A plugin that raises, an answer that is not a stoppable, and no answer at all
    stop the start with a ConfigError; an empty table asks nobody."""
    from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
    from nucleo_trio.errors import ConfigError
    from nucleo_trio.jobs import AbstractStoppable

    asked: list[tuple[object, Mapping[str, Any]]] = []

    class Servers(AbstractStoppable):
        stopped = False

        def do_stop(self) -> None:
            self.stopped = True

    class McpPlugin:
        @hookimpl
        def nucleo_trio_mcp_servers(self, dispatcher: Any, settings: Mapping[str, Any]) -> Any:
            asked.append((dispatcher, settings))
            return Servers()

    table = {"servers": {"files": {"command": "files-server"}}}
    pm = make_plugin_manager(load_entrypoints=False, plugins=[McpPlugin()])
    async with open_dispatcher(DispatcherConfig(mcp=table), plugin_manager=pm) as dispatcher:
        assert asked == [(dispatcher, table)]
        servers = dispatcher.mcp
        assert isinstance(servers, Servers) and not servers.stopped
    assert servers.stopped
    async with open_dispatcher(plugin_manager=pm) as dispatcher:
        assert dispatcher.mcp is None and len(asked) == 1

    class Refuses:
        @hookimpl
        def nucleo_trio_mcp_servers(self) -> Any:
            raise ValueError("servers.files: unknown key comand")

    class NotStoppable:
        @hookimpl
        def nucleo_trio_mcp_servers(self) -> Any:
            return object()

    for plugins, message in (
        ([Refuses()], r"mcp: plugin .*Refuses.* refused it: servers.files: unknown key comand"),
        ([NotStoppable()], r"mcp: plugin .*NotStoppable.* not an AbstractStoppable"),
        ([], r"no installed plugin serves MCP servers.*pip install -e plugins/nucleo-trio-mcp"),
    ):
        broken = make_plugin_manager(load_entrypoints=False, plugins=plugins)
        with pytest.raises(ConfigError, match=message):
            async with open_dispatcher(DispatcherConfig(mcp=table), plugin_manager=broken):
                pass  # pragma: no cover - the start is refused
