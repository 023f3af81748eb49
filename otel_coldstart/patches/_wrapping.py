"""Install and remove wrapt wrappers so that removal restores the exact original object."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import Any

import wrapt


def installed_version(distribution: str) -> str | None:
    """The installed version of a library as it reports itself: asking never imports it
    (importing torch takes seconds and must stay the host's decision).

    The build matters, not only the release: PyPI's CUDA wheel of torch says ``2.13.0`` in its
    metadata and ``2.13.0+cu130`` in ``torch.__version__`` (the CPU wheel says ``+cpu`` in
    both). So the module's own ``__version__`` where it is imported, else its ``version.py``
    (a file read), else the metadata (issue 42)."""
    import sys

    module = sys.modules.get(distribution)
    reported = getattr(module, "__version__", None) if module is not None else None
    if isinstance(reported, str) and reported:
        return str(reported)  # torch's is a TorchVersion (a str subclass)
    from importlib import metadata  # 7.5 ms of imports: only for whoever asks (never instrument())

    try:
        found = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    return _version_file(found, distribution) or found.version


def _version_file(found, distribution: str) -> str | None:
    """``__version__`` as ``<package>/version.py`` assigns it (torch writes the build there)."""
    import re

    try:
        with open(found.locate_file(f"{distribution}/version.py"), encoding="utf-8") as handle:
            text = handle.read(4096)
    except (OSError, ValueError, TypeError):  # none (most libraries), or not a plain file
        return None
    match = re.search(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", text or "", re.M)
    return match.group(1) if match else None


class LoadedOnFirstUse:
    """Stands in for a sibling module until one of its attributes is first read: then imports
    it and binds it in the importing module's namespace in place of itself, so later reads are
    plain global lookups. For the GPU-only helpers of a patch module: a start-up that never
    reaches a GPU never loads them (~1 ms of imports on the host's thread at torch's import,
    and their objects in the collector's heap). An import of ours on the host's thread counts
    as the plugin's own time (patches/imports.py)."""

    __slots__ = ("_namespace", "_name", "_qualified")

    def __init__(self, namespace: dict, qualified_name: str) -> None:
        self._namespace = namespace
        self._qualified = qualified_name
        self._name = qualified_name.rpartition(".")[2]

    def __getattr__(self, attribute: str):
        module = importlib.import_module(self._qualified)
        self._namespace[self._name] = module
        return getattr(module, attribute)


class _ModuleByName:
    """Pickles as ``importlib.import_module(name)``: the pickle names only the standard
    library, so a process without otel-coldstart can still load it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self):
        return (importlib.import_module, (self.name,))


class _AttributeByName:
    """Pickles as ``getattr(owner, name)``, where owner pickles by reference in turn."""

    __slots__ = ("owner", "name")

    def __init__(self, owner: Any, name: str) -> None:
        self.owner = owner
        self.name = name

    def __reduce__(self):
        return (getattr, (self.owner, self.name))


def reduce_by_reference(original: Any):
    """A reduce value that, when unpickled, looks the original up by its qualified name:
    exactly what pickle stores for an unwrapped module-level function (so a spawned
    process gets that name's object, wrapped or not, as it would have)."""
    module = getattr(original, "__module__", None)
    qualname = getattr(original, "__qualname__", None) or getattr(original, "__name__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        raise TypeError(f"cannot pickle {original!r}: it has no importable qualified name")
    owner: Any = _ModuleByName(module)
    *path, last = qualname.split(".")
    for part in path:
        owner = _AttributeByName(owner, part)
    return (getattr, (owner, last))


def _reduce_original(original: Any, protocol: int):
    """What pickle would store for ``original``: functions and classes by qualified name;
    anything else (a method descriptor such as ``TensorBase.to``) by its own reduce."""
    if isinstance(original, (types.FunctionType, types.BuiltinFunctionType, type)):
        return reduce_by_reference(original)
    try:
        value = original.__reduce_ex__(protocol)
    except Exception:  # an object pickle cannot reduce: stored by its qualified name
        return reduce_by_reference(original)
    return reduce_by_reference(original) if isinstance(value, str) else value


class _ColdstartBoundWrapper(wrapt.BoundFunctionWrapper):
    """A wrapped method bound to an instance (``tensor.to``): pickles as the bound
    original does, ``getattr(instance, name)``."""

    def __reduce_ex__(self, protocol):
        instance = self._self_instance
        if instance is None or isinstance(instance, type):
            return _reduce_original(self.__wrapped__, protocol)
        return (getattr, (instance, self.__name__))

    def __reduce__(self):
        return self.__reduce_ex__(2)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class ColdstartWrapper(wrapt.FunctionWrapper):
    """Marks our wrappers, so a second patch() can see one is already in place.

    A wrapt proxy refuses to pickle or copy by default; the host's code pickles functions
    (``ProcessPoolExecutor(mp_context=spawn).map(load_file, shards)``) and deep-copies
    objects that hold them. So a wrapper pickles by reference to the original's qualified
    name, like the plain function, and copies to itself, like a function does.
    """

    __bound_function_wrapper__ = _ColdstartBoundWrapper

    def __reduce_ex__(self, protocol):
        return _reduce_original(self.__wrapped__, protocol)

    def __reduce__(self):
        return self.__reduce_ex__(2)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class PatchSet:
    """The wrappers one patch module installed, for exact restoration."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, bool, Any]] = []
        self._installed: list[tuple[Any, ColdstartWrapper]] = []  # (original, its wrapper)

    def __bool__(self) -> bool:
        return bool(self._saved)

    is_patched = __bool__  # a patch module's is_patched() where this set is all it installed

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
        # One function under two names (torch.load is torch.serialization.load) gets one
        # wrapper: identity checks and pickling by name keep working as before.
        installed = next((w for o, w in self._installed if o is original and w._self_wrapper is wrapper), None)
        if installed is None:
            installed = ColdstartWrapper(original, wrapper)
            self._installed.append((original, installed))
        setattr(owner, name, installed)
        self._saved.append((owner, name, own, original))

    def restore(self) -> None:
        self._installed.clear()
        while self._saved:
            owner, name, own, original = self._saved.pop()
            if own:
                setattr(owner, name, original)
            else:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
