"""Install and remove wrapt wrappers so that removal restores the exact original object."""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable

import wrapt


def installed_version(distribution: str) -> str | None:
    """The installed version of a library, read from its metadata: asking never imports it
    (importing torch takes seconds and must stay the host's decision)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


class ColdstartWrapper(wrapt.FunctionWrapper):
    """Marks our wrappers, so a second patch() can see one is already in place."""


class PatchSet:
    """The wrappers one patch module installed, for exact restoration."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, bool, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._saved)

    def wrap(self, owner: Any, name: str, wrapper: Callable) -> None:
        current = getattr(owner, name, None)
        # Look in the owner's own dict: getattr on a class returns a freshly bound wrapper,
        # which would hide ours and stack a second layer.
        if current is None or isinstance(vars(owner).get(name), ColdstartWrapper):
            return
        own = name in vars(owner)
        # The attribute as stored (a classmethod/staticmethod object, or inherited from a
        # base such as torch._C.TensorBase) is what must come back on restore.
        original = vars(owner)[name] if own else current
        setattr(owner, name, ColdstartWrapper(original, wrapper))
        self._saved.append((owner, name, own, original))

    def restore(self) -> None:
        while self._saved:
            owner, name, own, original = self._saved.pop()
            if own:
                setattr(owner, name, original)
            else:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
