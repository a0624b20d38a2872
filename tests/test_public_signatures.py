"""Every tooldir type a public signature names is itself public, and every exception class
tooldir defines is in the documented hierarchy (tooldir/errors.py)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterator
from typing import Any

import tooldir
import tooldir.errors


def _callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for name in tooldir.__all__:
        obj = getattr(tooldir, name)
        if inspect.isclass(obj):
            if "__init__" in vars(obj) or any("__init__" in vars(b) for b in obj.__mro__[1:-1]):
                yield f"{name}.__init__", obj.__init__
            for attr, member in inspect.getmembers(obj):
                if attr.startswith("_") or not (inspect.isfunction(member) or inspect.ismethod(member)):
                    continue
                if getattr(member, "__module__", "").startswith("tooldir"):
                    yield f"{name}.{attr}", member
        elif callable(obj):
            yield name, obj


def _named_types(hint: Any) -> Iterator[type]:
    if inspect.isclass(hint):
        yield hint
    for arg in typing.get_args(hint):
        yield from _named_types(arg)
    origin = typing.get_origin(hint)
    if inspect.isclass(origin):
        yield origin


def test_the_walk_finds_tooldir_types_in_public_signatures() -> None:
    seen = {t for _name, fn in _callables() for hint in typing.get_type_hints(fn).values() for t in _named_types(hint)}
    assert {tooldir.LoadConfig, tooldir.Snapshot, tooldir.Policy} <= seen


#: Constructors a host never calls itself: it gets the object from the front door or another
#: factory of the public API (the types only these name are the machinery behind it, in their modules).
NOT_CALLED_BY_HOSTS = {
    "Toolbox.__init__",  # tooldir.open() makes one
    "Session.__init__",  # Toolbox.session()
    "Watcher.__init__",  # tooldir.open(watch=True): Toolbox.watcher
    "LoadConfig.__init__",  # make_config()
    "ToolRecord.__init__",  # a load makes the records of a snapshot
    "Verdict.__init__",  # explain()
    "PackageRef.__init__",  # locate()
}


def test_every_tooldir_type_named_in_a_public_signature_is_exported() -> None:
    public = {id(getattr(tooldir, n)) for n in tooldir.__all__}
    missing = set()
    for name, fn in _callables():
        if name in NOT_CALLED_BY_HOSTS:
            continue
        for hint in typing.get_type_hints(fn).values():
            for t in _named_types(hint):
                if t.__module__.startswith("tooldir") and id(t) not in public:
                    missing.add(f"{t.__module__}.{t.__qualname__} (in {name})")
    assert sorted(missing) == []


def _exception_classes() -> Iterator[type[BaseException]]:
    for info in pkgutil.walk_packages(tooldir.__path__, "tooldir."):
        if info.name == "tooldir.__main__":
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                yield obj


def test_every_exception_class_is_a_tooldir_error_or_a_documented_builtin_subclass() -> None:
    found = set(_exception_classes())
    assert tooldir.errors.DiscoveryError in found  # the walk sees errors.py itself
    doc = tooldir.errors.__doc__ or ""
    listed = {word for line in doc.splitlines() for word in line.replace("─", " ").split()}
    undocumented = sorted(c.__qualname__ for c in found if c.__qualname__ not in listed)
    assert undocumented == []
    public = {getattr(tooldir, n) for n in tooldir.__all__}
    for cls in found:
        if not issubclass(cls, tooldir.ToolDirError):
            # internal signals: built-in bases only, never exported (they never reach a caller)
            assert cls not in public
            assert all(b.__module__ == "builtins" for b in cls.__mro__[1:] if not b.__module__.startswith("tooldir"))
