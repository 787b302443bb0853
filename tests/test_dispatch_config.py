"""Configuration and plugins at the dispatcher's start."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import (
    DispatcherConfig,
    JobDispatcher,
    LimiterConfig,
    MemoryConfig,
    open_dispatcher,
)
from nucleo_trio.errors import ConfigError, UsageKeyError, UsageTypeError
from nucleo_trio.jobs import JobRequirements, workflow
from nucleo_trio.plugins import make_plugin_manager

from .jobs_for_tests import Echo


def test_a_config_from_plain_data() -> None:
    config = DispatcherConfig.from_mapping(
        {
            "http_connections": 8,
            "shutdown_timeout": 5,
            "limiters": {"db": {"kind": "counting", "settings": {"capacity": 4}}},
        }
    )
    assert config.http_connections == 8
    assert config.limiters == {"db": LimiterConfig(kind="counting", settings={"capacity": 4})}


def test_a_typo_in_a_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match="htp_connections"):
        DispatcherConfig.from_mapping({"htp_connections": 8})
    with pytest.raises(ConfigError, match="http_connections"):
        DispatcherConfig.from_mapping({"http_connections": 0})
    with pytest.raises(ConfigError, match="expected a mapping"):
        DispatcherConfig.from_mapping(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_a_setting_that_reads_true_or_false_refuses_anything_else() -> None:
    """A string where a bool belongs is refused naming the key, never read as truthy."""
    with pytest.raises(
        ConfigError, match=r"log_events must be a bool \(True or False\), got str 'no'"
    ):
        DispatcherConfig.from_mapping({"log_events": "no"})
    assert DispatcherConfig.from_mapping({"log_events": True}).log_events is True


async def test_configured_limiters_are_built_through_the_plugins_at_start() -> None:
    """The built-in counting kind and the test distribution's fixed_slots kind, by name."""
    config = DispatcherConfig(
        limiters={
            "db": LimiterConfig(kind="counting", settings={"capacity": 2}),
            "pool": LimiterConfig(kind="fixed_slots", settings={"slots": 3}),
        }
    )
    async with open_dispatcher(config) as d:
        db = d.limiters["db"]
        assert isinstance(db, CountingGate) and db.capacity == 2
        assert d.limiters["pool"].capacity == 3
        job = Echo(
            workflow("u", "wf"),
            requirements=lambda: (
                JobRequirements()
                .require_rate_limiter(d.limiters["db"])
                .require_rate_limiter(d.limiters["pool"])
            ),
        )
        assert await d.submit(job).result() == "ok"
        assert db.in_use == 0


async def test_an_unknown_limiter_kind_refuses_the_start(nursery: trio.Nursery) -> None:
    d = JobDispatcher(DispatcherConfig(limiters={"x": LimiterConfig(kind="nope")}))
    with pytest.raises(ConfigError, match="limiter 'x'.*nope"):
        await nursery.start(d.run)


async def test_a_bad_config_raises_bare_from_open_dispatcher() -> None:
    config = DispatcherConfig(limiters={"x": LimiterConfig(kind="nope")})
    with pytest.raises(ConfigError, match="limiter 'x'"):
        async with open_dispatcher(config):
            pass  # pragma: no cover - never entered


async def test_a_plugin_manager_can_be_handed_in() -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    async with open_dispatcher(plugin_manager=pm) as d:
        assert d.plugins is pm
        assert d.limiter_kinds is not None and "counting" in d.limiter_kinds
        assert "fixed_slots" not in d.limiter_kinds


async def test_a_token_bucket_declared_in_configuration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The built-in token_bucket kind: a model's quota declared by kind in plain data."""
    from nucleo_trio.admission import TokenBucket

    config = DispatcherConfig.from_mapping(
        {
            "limiters": {
                "small-model": {"kind": "token_bucket", "settings": {"rpm": 60, "tpm": 6000}}
            }
        }
    )
    async with open_dispatcher(config) as d:
        quota = d.limiters["small-model"]
        assert isinstance(quota, TokenBucket) and quota.capacity == 6000
        job = Echo(
            workflow("u", "wf"),
            requirements=lambda: JobRequirements().require_rate_limiter(quota, 1000),
        )
        assert await d.submit(job).result() == "ok"
        assert quota.in_use == 1000  # a TIME account keeps its debit after the job


async def test_an_elastic_window_declared_in_configuration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The built-in elastic_window kind: max_requests per window seconds, needing the http gate."""
    from nucleo_trio.admission import ElasticWindow

    config = DispatcherConfig.from_mapping(
        {
            "limiters": {
                "search": {"kind": "elastic_window", "settings": {"max_requests": 2, "window": 10}}
            }
        }
    )
    async with open_dispatcher(config) as d:
        window = d.limiters["search"]
        assert isinstance(window, ElasticWindow)
        assert window.capacity == 2 and window.requires_http_connection
        start = trio.current_time()
        for _ in range(3):
            job = Echo(
                workflow("u", "wf"),
                requirements=lambda: JobRequirements().require_rate_limiter(window),
            )
            await d.submit(job).result()
        assert trio.current_time() - start == pytest.approx(10)  # the third waited for a slot


def test_a_config_from_a_toml_or_json_file(tmp_path: Path) -> None:
    """from_file reads TOML by its suffix and JSON otherwise; a file whose top level is not a
    table, and one that is not valid in its format, are refused naming the file."""
    toml = tmp_path / "a.toml"
    toml.write_text("http_connections = 12\nshutdown_timeout = 5\n")
    assert DispatcherConfig.from_file(toml).http_connections == 12
    json_file = tmp_path / "a.json"
    json_file.write_text('{"http_connections": 3, "log_events": true}')
    loaded = DispatcherConfig.from_file(json_file)
    assert (loaded.http_connections, loaded.log_events) == (3, True)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"list.json: expected a table of settings, got list"):
        DispatcherConfig.from_file(listed)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match=r"broken.json: not valid JSON"):
        DispatcherConfig.from_file(broken)


# -- hostile values: refused by name, from code and from a file alike -----------------------------

NAN = float("nan")
INF = float("inf")
HOSTILE_SETTINGS: list[tuple[str, object]] = [
    ("shutdown_timeout", NAN),
    ("shutdown_timeout", INF),
    ("shutdown_timeout", -INF),
    ("shutdown_timeout", -1),
    ("shutdown_timeout", -0.5),
    ("shutdown_timeout", True),
    ("shutdown_timeout", "10"),
    ("shutdown_timeout", None),
    ("http_connections", 0),
    ("http_connections", -3),
    ("http_connections", 8.9),
    ("http_connections", 8.0),
    ("http_connections", NAN),
    ("http_connections", True),
    ("http_connections", "8"),
    ("seed", 1.5),
    ("seed", NAN),
    ("seed", "7"),
    ("seed", False),
    ("health_every", 0),
    ("health_every", -1),
    ("health_every", 2.0),
    ("health_every", INF),
    ("health_every", True),
    ("health_every", "50"),
    ("models", 5),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE_SETTINGS)
def test_a_hostile_setting_is_refused_naming_it(field: str, value: object) -> None:
    """From code and from plain data, the same ConfigError names the setting and the value;
    plain data is judged as written (cattrs would read "10" as 10.0 and true as 1)."""
    with pytest.raises(ConfigError, match=rf"DispatcherConfig\.{field} must be .*got") as coded:
        DispatcherConfig(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=rf"DispatcherConfig\.{field} must be .*got") as read:
        DispatcherConfig.from_mapping({field: value})
    shown = "nan" if value != value else repr(value)
    assert shown in str(coded.value) and shown in str(read.value)


def test_a_shutdown_timeout_of_nan_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """Item 9: ``shutdown_timeout = nan`` was accepted and failed at shutdown; TOML spells NaN
    and infinity, and the file is refused naming the setting."""
    for literal in ("nan", "inf", "-inf", "-1", "true", '"30"'):
        path = tmp_path / "dispatcher.toml"
        path.write_text(f"shutdown_timeout = {literal}\n")
        with pytest.raises(ConfigError, match=r"DispatcherConfig\.shutdown_timeout must be"):
            DispatcherConfig.from_file(path)


def test_the_good_settings_are_kept_as_written() -> None:
    """0 still means the default 30 s wait; ints are seconds; a huge finite wait is allowed."""
    assert DispatcherConfig(shutdown_timeout=0).shutdown_timeout == 0
    assert DispatcherConfig.from_mapping({"shutdown_timeout": 5}).shutdown_timeout == 5
    assert DispatcherConfig(shutdown_timeout=1e300).shutdown_timeout == 1e300
    config = DispatcherConfig.from_mapping(
        {"http_connections": 2, "seed": -4, "health_every": 3, "models": "m.toml"}
    )
    assert (config.http_connections, config.seed, config.health_every, config.models) == (
        2,
        -4,
        3,
        "m.toml",
    )
    assert DispatcherConfig.from_mapping({"seed": None}).seed is None


def test_memory_and_heartbeat_refuse_by_name_with_a_config_error() -> None:
    with pytest.raises(ConfigError, match="MemoryConfig.enabled must be True or False, got 'yes'"):
        DispatcherConfig.from_mapping({"memory": {"enabled": "yes"}})
    for limit in (NAN, INF, -1, True, "lots"):
        with pytest.raises(ConfigError, match="MemoryConfig.limit"):
            DispatcherConfig.from_mapping({"memory": {"limit": limit}})
    with pytest.raises(ConfigError, match="HeartbeatConfig.kind must name a heartbeat store"):
        DispatcherConfig.from_mapping({"heartbeat": {"kind": ""}})


async def test_a_dispatcher_with_a_nan_shutdown_timeout_never_starts() -> None:
    with pytest.raises(ConfigError, match="shutdown_timeout"):
        async with open_dispatcher(DispatcherConfig(shutdown_timeout=NAN)):
            pass  # pragma: no cover - never reached


# -- a file's refusal names the file, the key and the value ---------------------------------------

FILE_REFUSALS: list[tuple[str, str, str]] = [
    ("log_events = 1\n", "log_events", "got 1"),
    ('log_events = "yes"\n', "log_events", "'yes'"),
    ("htp_connections = 8\n", "htp_connections", "htp_connections = 8"),
    ("http_connections = 2.7\n", "http_connections", "got 2.7"),
    ('http_connections = "16"\n', "http_connections", "'16'"),
    ("seed = true\n", "seed", "True"),
    ("memory = { enabled = 1 }\n", "enabled", "got 1"),
    ("memory = { enabled = true, limt = 5 }\n", "limt", "limt"),
    ("memory = 1\n", "memory", "got 1"),
    ("[heartbeat]\nkind = 3\n", "HeartbeatConfig.kind", "got 3"),
    ("[limiters.db]\nkind = 3\n", "LimiterConfig.kind", "got 3"),
    ('[limiters.db]\nkind = "counting"\ncapacity = 4\n', "capacity", "capacity = 4"),
    ('[databases.notes]\nkind = "sqlite"\nsettings = 5\n', "DatabaseConfig.settings", "got 5"),
]


@pytest.mark.parametrize(("text", "key", "value"), FILE_REFUSALS)
def test_a_refusal_from_a_file_names_the_file_the_key_and_the_value(
    tmp_path: Path, text: str, key: str, value: str
) -> None:
    path = tmp_path / "dispatcher.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        DispatcherConfig.from_file(path)
    message = str(refused.value)
    assert f"invalid dispatcher config in {path}: " in message
    assert key in message and value in message, message


def test_an_unknown_key_names_its_value_the_nearest_key_and_the_known_keys() -> None:
    with pytest.raises(ConfigError) as refused:
        DispatcherConfig.from_mapping({"http_conections": 16})
    assert str(refused.value).startswith(
        "invalid dispatcher config: unknown key(s) http_conections = 16; did you mean "
        "'http_connections'? (known: http_connections,"
    )
    with pytest.raises(ConfigError) as far:
        DispatcherConfig.from_mapping({"colour": True})
    assert "did you mean" not in str(far.value)  # nothing close: only the known keys


def test_a_misspelt_keyword_names_the_nearest_one() -> None:
    """The constructors refuse a keyword they do not take with a TypeError that names the
    nearest one they do, and lists them all."""
    with pytest.raises(TypeError) as refused:
        DispatcherConfig(shutdown_timout=5)  # type: ignore[call-arg]
    assert str(refused.value).startswith(
        "DispatcherConfig() got an unexpected keyword argument 'shutdown_timout'; did you mean "
        "'shutdown_timeout'? It takes: http_connections, shutdown_timeout,"
    )
    assert isinstance(refused.value, UsageTypeError)
    with pytest.raises(TypeError, match=r"MemoryConfig\(\).*'limt'; did you mean 'limit'\?"):
        MemoryConfig(limt=0.5)  # type: ignore[call-arg]


async def test_a_misspelt_limiter_setting_or_kind_names_the_nearest_one() -> None:
    """A configured limiter whose setting or kind is misspelt stops the start naming the
    nearest known one; and a name dispatcher.limiters does not hold lists the names it does."""
    bad = {
        "capcity": ({"kind": "counting", "settings": {"capcity": 4}}, "takes no setting "
        "'capcity'; did you mean 'capacity'? (its settings: capacity)"),
        "countng": ({"kind": "countng"}, "unknown limiter kind 'countng' (did you mean "
        "'counting'?)"),
    }  # fmt: skip
    for declared, expected in bad.values():
        config = DispatcherConfig.from_mapping({"limiters": {"db": declared}})
        with pytest.raises(ConfigError) as refused:
            async with open_dispatcher(config):
                pass
        assert expected in str(refused.value), str(refused.value)
    config = DispatcherConfig.from_mapping(
        {"limiters": {"db": {"kind": "counting", "settings": {"capacity": 4}}}}
    )
    async with open_dispatcher(config) as dispatcher:
        assert dispatcher.limiters["db"].capacity == 4
        with pytest.raises(KeyError) as missing:
            dispatcher.limiters["databse"]
        assert str(missing.value).startswith(
            "no limiter named 'databse' in dispatcher.limiters (configured: 'db')"
        )
        with pytest.raises(UsageKeyError, match=r"did you mean 'db'\?"):
            dispatcher.limiters["dbb"]
        assert dispatcher.limiters.get("databse") is None


def test_a_bool_setting_takes_a_bool_from_code_and_files_alike(tmp_path: Path) -> None:
    """1 and "true" are not True: refused by name from the constructor, plain data and a file."""
    for value in (1, 0, "true", None):
        with pytest.raises(ConfigError, match=r"DispatcherConfig\.log_events must be a bool"):
            DispatcherConfig(log_events=value)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"DispatcherConfig\.log_events must be a bool"):
            DispatcherConfig.from_mapping({"log_events": value})
        with pytest.raises(ConfigError, match=r"MemoryConfig\.enabled must be True or False"):
            MemoryConfig(enabled=value)  # type: ignore[arg-type]
    json_file = tmp_path / "dispatcher.json"
    json_file.write_text('{"memory": {"enabled": 0}}')
    with pytest.raises(ConfigError, match=r"dispatcher.json: MemoryConfig\.enabled .* got 0"):
        DispatcherConfig.from_file(json_file)
    assert DispatcherConfig.from_mapping({"memory": False}).memory == MemoryConfig(enabled=False)


@pytest.mark.parametrize("name", ["dispatcher.yaml", "dispatcher.yml", "dispatcher.ini", "conf"])
def test_a_file_in_another_format_is_refused_naming_its_suffix(tmp_path: Path, name: str) -> None:
    """A YAML file is not reported as "not valid JSON": its format is refused by name."""
    path = tmp_path / name
    path.write_text("http_connections: 8\n")
    suffix = repr(path.suffix) if path.suffix else "no suffix"
    with pytest.raises(ConfigError) as refused:
        DispatcherConfig.from_file(path)
    assert str(refused.value) == (
        f"dispatcher config {path}: unsupported format ({suffix}); "
        "write it as TOML (.toml) or JSON (.json)"
    )
