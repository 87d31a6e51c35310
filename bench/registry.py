"""A small name -> object registry (in the spirit of timm's model registry).

Plugins register themselves with a decorator at import time; the package ``__init__``
imports every module of the package, so adding a method or a suite is one new file.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Generic, Iterator, TypeVar

from bench.errors import UnknownNameError

T = TypeVar("T")


class DuplicateNameError(ValueError):
    """A name registered twice with different objects: ``existing`` holds it, ``new`` asked for it
    (bench.plugins turns it into an error naming both sources)."""

    def __init__(self, kind: str, name: str, existing, new):
        super().__init__(f"{kind} {name!r} registered twice")
        self.kind, self.name, self.existing, self.new = kind, name, existing, new


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise DuplicateNameError(self.kind, name, self._items[name], obj)
            self._items[name] = obj
            return obj

        return deco

    def register_class(self, name: str) -> Callable[[T], T]:
        """Like :meth:`register`, and also sets the class attribute ``name``."""

        def deco(cls: T) -> T:
            cls.name = name
            return self.register(name)(cls)

        return deco

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a plugin file loaded again after an edit registers its new classes)."""
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def import_submodules(package_name: str) -> None:
    """Import every module of a package so that their ``@register`` decorators run."""
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package_name}.{info.name}")
