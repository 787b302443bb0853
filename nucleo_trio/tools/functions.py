"""Function tools: a coroutine function made into a :class:`~nucleo_trio.jobs.Tool`.

Agent frameworks and scripts have coroutine functions, not classes. :func:`function_tool` turns
``async def fetch(context, url: str) -> str`` into a :class:`ToolFunction`; calling it with a
parent identity and the function's own arguments builds a job ready to submit::

    @function_tool(timeout=10, requirements=JobRequirements().require_http())
    async def fetch(context: JobContext, url: str) -> str:
        ...

    handle = dispatcher.submit(fetch(root, "https://example.org"))
    page = await handle.result()  # a str, to mypy as well

Each decorated function gets a job class of its own, named after the function (its snapshots
say ``fetch``, its ids start ``fetch-``), so the knobs given to the decorator are that class's
defaults and go through the very checks a class body's values go through: a NaN timeout, a
negative retry budget or a bool priority is refused when the function is decorated, with the
message a class would get.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

import attrs

from ..guardrails.kinds import AdmissionGuardrail, AuthGuardrail, ContentGuardrail, Guardrail
from ..jobs.job import DEFAULT_TIMEOUT, DEFAULT_UPSTREAM_RETRIES, Tool
from ..jobs.requirements import JobRequirements

if TYPE_CHECKING:
    from ..jobs.context import JobContext
    from ..jobs.identity import Identifiable

__all__ = ["FunctionTool", "GuardFactory", "ToolDecorator", "ToolFunction", "function_tool"]

P = ParamSpec("P")
R = TypeVar("R")

GuardFactory = Callable[["FunctionTool[Any]"], "Guardrail"]
"""What ``guards=`` takes: a callable that builds one guard with the job as its parent, such as
a guard class (``PIIDetectionGuardrail``) or ``lambda job: PayloadSizeCapGuardrail(job, 200)``."""

Requirements = JobRequirements | Callable[[], JobRequirements]


class FunctionTool(Tool[R]):
    """One call of a function tool: the job :class:`ToolFunction` builds.

    ``args`` and ``kwargs`` are the arguments it was called with (already bound to the
    function's signature, so a missing or unknown argument was refused at the call).
    ``input``, what the input-side content guards judge, is the value of the one argument when
    the function takes one, a dict of every argument by name when it takes several, and
    ``None`` when it takes none. Its knobs may be changed per call before it is submitted
    (``job.timeout = 5``), as on any job.
    """

    _nucleo_function: Callable[..., Awaitable[Any]]
    _nucleo_signature: inspect.Signature | None = None
    _nucleo_requirements: Requirements | None = None

    def __init__(
        self,
        parent: Identifiable,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        cls = type(self)
        signature = cls._nucleo_signature
        if signature is None:  # a class the decorator did not make
            raise TypeError(
                "FunctionTool is built by a function decorated with @function_tool; "
                "call that function with a parent and its arguments"
            )
        kwargs = dict(kwargs or {})
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{cls.__qualname__}(): {exc}") from None
        super().__init__(parent)
        bound.apply_defaults()
        self.args: tuple[Any, ...] = bound.args
        """The positional arguments the function is called with, defaults filled in."""
        self.kwargs: dict[str, Any] = bound.kwargs
        """The keyword arguments the function is called with (keyword-only parameters)."""
        arguments = dict(bound.arguments)
        if not arguments:
            self.input: Any = None
            """What the input-side content guards judge: the one argument's value, a dict of
            every argument by name when there are several, ``None`` when there are none."""
        elif len(arguments) == 1:
            self.input = next(iter(arguments.values()))
        else:
            self.input = arguments

    def requirements(self) -> JobRequirements:
        """The demand declared in the decorator: a copy of the :class:`JobRequirements` it was
        given, or what its function returns (called at submit and once per attempt)."""
        declared = type(self)._nucleo_requirements
        if declared is None:
            return JobRequirements()
        if isinstance(declared, JobRequirements):
            return _copy_requirements(declared)
        made = declared()
        if not isinstance(made, JobRequirements):
            raise TypeError(
                f"{type(self).__qualname__}: the requirements function must return a "
                f"JobRequirements, got {type(made).__name__} {made!r}"
            )
        return made

    async def execute(self, context: JobContext) -> R:
        """Await the function with the context and the arguments of this call."""
        function = type(self)._nucleo_function
        return cast(R, await function(context, *self.args, **self.kwargs))

    def __repr__(self) -> str:
        return f"<{self.name} {type(self).__qualname__}{_shown_call(self.args, self.kwargs)}>"


class _GuardedFunctionTool(FunctionTool[R]):
    """A function tool whose decorator declared guards: builds them fresh per submission."""

    _nucleo_guards: tuple[GuardFactory, ...] = ()
    _nucleo_built: list[Guardrail] | None = None

    def _built(self, kind: type) -> list[Any]:
        # Built once: a job instance is submitted once, and its three declarations share them.
        if self._nucleo_built is None:
            self._nucleo_built = self._guards()
        return [guard for guard in self._nucleo_built if isinstance(guard, kind)]

    def _guards(self) -> list[Guardrail]:
        built: list[Guardrail] = []
        for factory in type(self)._nucleo_guards:
            guard = factory(self)
            if not isinstance(guard, ContentGuardrail | AuthGuardrail | AdmissionGuardrail):
                raise TypeError(
                    f"{type(self).__qualname__}: guards= must build content, auth or admission "
                    f"guardrails, but {_callable_name(factory)} built "
                    f"{type(guard).__name__} {guard!r}"
                )
            built.append(guard)
        return built

    def content_guardrails(self) -> Sequence[ContentGuardrail]:
        return self._built(ContentGuardrail)

    def auth_guardrails(self) -> Sequence[AuthGuardrail]:
        return self._built(AuthGuardrail)

    def admission_guardrails(self) -> Sequence[AdmissionGuardrail]:
        return self._built(AdmissionGuardrail)


class ToolFunction(Generic[P, R]):
    """A coroutine function made into a tool by :func:`function_tool`.

    Call it with the parent identity (a :func:`~nucleo_trio.jobs.workflow` root or the job that
    submits it) followed by the function's own arguments: ``fetch(root, url)`` builds a
    :class:`FunctionTool` to submit, and nothing runs until the dispatcher runs it. The
    arguments are checked against the function's signature at that call. ``job_class`` is the
    generated job class (named after the function), ``function`` the function itself.
    """

    def __init__(
        self,
        function: Callable[Concatenate[JobContext, P], Awaitable[R]],
        job_class: type[FunctionTool[R]],
    ) -> None:
        self.function = function
        """The decorated coroutine function itself."""
        self.job_class = job_class
        """The :class:`FunctionTool` subclass made for the function, named after it; its
        class attributes carry the decorator's settings."""
        self.__wrapped__ = function
        self.__name__: str = function.__name__
        self.__qualname__: str = function.__qualname__
        self.__module__ = function.__module__
        self.__doc__ = function.__doc__

    def __call__(
        self, parent: Identifiable, /, *args: P.args, **kwargs: P.kwargs
    ) -> FunctionTool[R]:
        """A job that runs the function with these arguments, built under ``parent``."""
        return self.job_class(parent, args, kwargs)

    def __repr__(self) -> str:
        return f"<function tool {self.__module__}.{self.__qualname__}>"


@attrs.frozen
class ToolDecorator:
    """What ``function_tool(...)`` with settings returns: apply it to a coroutine function."""

    timeout: float | None = DEFAULT_TIMEOUT
    """The tool's deadline per attempt, in seconds (``None`` for none); thirty minutes by
    default."""
    priority: int = 0
    """The tool's priority; higher runs first in the priority lane. 0 by default."""
    upstream_retries: int = DEFAULT_UPSTREAM_RETRIES
    """How many times an upstream signal re-runs the tool; 3 by default."""
    tolerates_dependency_failures: bool = False
    """Whether the tool still runs when a dependency failed; ``False`` by default."""
    requirements: Requirements | None = None
    """A :class:`~nucleo_trio.jobs.JobRequirements` (each job gets a copy) or a function of no
    arguments that builds one per attempt; ``None`` declares nothing."""
    guards: Sequence[GuardFactory] = ()
    """Callables that build one content, auth or admission guard each from the job; built
    afresh for every submission."""
    name: str | None = None
    """The display name snapshots carry; ``None`` leaves the function's name."""
    action: str = ""
    """The action snapshots carry, as :func:`~nucleo_trio.jobs.display_name` gives it."""
    description: str | None = None
    """What the tool does; ``None`` takes the first paragraph of the function's docstring."""

    def __call__(
        self, function: Callable[Concatenate[JobContext, P], Awaitable[R]]
    ) -> ToolFunction[P, R]:
        """Make ``function`` a tool with this decorator's settings."""
        return ToolFunction(function, _job_class(function, self))


@overload
def function_tool(
    function: Callable[Concatenate[JobContext, P], Awaitable[R]], /
) -> ToolFunction[P, R]: ...


@overload
def function_tool(
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    priority: int = 0,
    upstream_retries: int = DEFAULT_UPSTREAM_RETRIES,
    tolerates_dependency_failures: bool = False,
    requirements: Requirements | None = None,
    guards: Sequence[GuardFactory] = (),
    name: str | None = None,
    action: str = "",
    description: str | None = None,
) -> ToolDecorator: ...


def function_tool(
    function: Callable[Concatenate[JobContext, P], Awaitable[R]] | None = None,
    /,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    priority: int = 0,
    upstream_retries: int = DEFAULT_UPSTREAM_RETRIES,
    tolerates_dependency_failures: bool = False,
    requirements: Requirements | None = None,
    guards: Sequence[GuardFactory] = (),
    name: str | None = None,
    action: str = "",
    description: str | None = None,
) -> ToolFunction[P, R] | ToolDecorator:
    """Make a coroutine function a tool: ``@function_tool`` or ``@function_tool(...)``.

    The function takes the job's :class:`~nucleo_trio.jobs.JobContext` first, then its own
    arguments, and returns the tool's result. The settings are the tool's defaults:

    - ``timeout``, ``priority``, ``upstream_retries``, ``tolerates_dependency_failures``: the
      four knobs of every job (see :class:`~nucleo_trio.jobs.AbstractJob`), checked here as a
      class body's values are, with the same errors;
    - ``requirements``: the demand admission grants before each attempt, a
      :class:`~nucleo_trio.jobs.JobRequirements` (each job gets a copy) or a function of no
      arguments that builds one (needed for a model binding, which is minted per attempt);
    - ``guards``: callables that build one guard each with the job as parent (a guard class,
      or a lambda); content, auth and admission guards, built afresh at each submission;
    - ``name`` and ``action``: the display name and action snapshots carry (as
      :func:`~nucleo_trio.jobs.display_name`); ``description``: what the tool does (the
      function's docstring when not given).

    A function that is not a coroutine function, or takes no parameter for the context, is
    refused with :class:`TypeError`.
    """
    decorator = ToolDecorator(
        timeout=timeout,
        priority=priority,
        upstream_retries=upstream_retries,
        tolerates_dependency_failures=tolerates_dependency_failures,
        requirements=requirements,
        guards=guards,
        name=name,
        action=action,
        description=description,
    )
    if function is None:
        _check_decorator(decorator, "function_tool()")
        return decorator
    return decorator(function)


def _job_class(function: Callable[..., Any], settings: ToolDecorator) -> type[FunctionTool[Any]]:
    """The job class of one decorated function; its class body carries the settings, so the
    knob checks of :class:`~nucleo_trio.jobs.AbstractJob` judge them."""
    if not inspect.iscoroutinefunction(function):
        raise TypeError(
            f"@function_tool takes a coroutine function (async def), got {_callable_name(function)}"
        )
    where = f"{function.__qualname__}"
    _check_decorator(settings, where)
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(
            f"@function_tool: {where} must take the job's context as its first positional "
            f"parameter (async def {function.__name__}(context, ...)), got {signature}"
        )
    description = settings.description
    if description is None:
        doc = inspect.getdoc(function)
        description = doc.split("\n\n", 1)[0].strip() if doc else None
    namespace: dict[str, Any] = {
        "__module__": function.__module__,
        "__qualname__": function.__qualname__,
        "__doc__": function.__doc__,
        "timeout": settings.timeout,
        "priority": settings.priority,
        "upstream_retries": settings.upstream_retries,
        "tolerates_dependency_failures": settings.tolerates_dependency_failures,
        "_nucleo_function": staticmethod(function),
        "_nucleo_signature": signature.replace(parameters=parameters[1:]),
        "_nucleo_requirements": settings.requirements,
        "__nucleo_description__": description,
        "__nucleo_action__": settings.action,
    }
    if settings.name is not None:
        namespace["__nucleo_display_name__"] = settings.name
    base: type[FunctionTool[Any]] = FunctionTool
    if settings.guards:
        namespace["_nucleo_guards"] = tuple(settings.guards)
        base = _GuardedFunctionTool
    return type(function.__name__, (base,), namespace)


def _check_decorator(settings: ToolDecorator, where: str) -> None:
    """Refuse, naming ``where``, the settings no job could use; the four knobs are judged by the
    job class itself when it is made."""
    requirements = settings.requirements
    if requirements is not None and not isinstance(requirements, JobRequirements):
        if not callable(requirements):
            raise TypeError(
                f"{where}: requirements must be a JobRequirements or a function that returns "
                f"one, got {type(requirements).__name__} {requirements!r}"
            )
    if isinstance(requirements, JobRequirements) and requirements.model_bindings:
        raise TypeError(
            f"{where}: a model binding is minted per attempt; pass requirements as a function "
            "(requirements=lambda: JobRequirements().require_model(...))"
        )
    guards: object = settings.guards
    if isinstance(guards, str | bytes) or not isinstance(guards, Sequence):
        raise TypeError(
            f"{where}: guards must be a list of guard classes or functions that build a guard, "
            f"got {type(guards).__name__} {guards!r}"
        )
    for factory in guards:
        if not callable(factory):
            raise TypeError(
                f"{where}: each of guards must be a guard class or a function that builds a "
                f"guard from the job, got {type(factory).__name__} {factory!r}"
            )
    for label, value in (("name", settings.name), ("description", settings.description)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{where}: {label} must be a str or None, got {value!r}")
    if not isinstance(settings.action, str):
        raise TypeError(f"{where}: action must be a str, got {settings.action!r}")


def _copy_requirements(declared: JobRequirements) -> JobRequirements:
    """A copy whose lists are its own, so one job's changes never reach the next job's."""
    return attrs.evolve(
        declared,
        rate_limiters=list(declared.rate_limiters),
        databases=list(declared.databases),
        model_bindings=list(declared.model_bindings),
    )


def _callable_name(value: object) -> str:
    name = getattr(value, "__qualname__", None)
    return name if isinstance(name, str) else f"{type(value).__name__} {value!r}"


def _shown_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    shown = [reprlib.repr(arg) for arg in args]
    shown.extend(f"{key}={reprlib.repr(value)}" for key, value in kwargs.items())
    return f"({', '.join(shown)})"
