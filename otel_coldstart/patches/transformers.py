"""transformers: the steps of ``from_pretrained`` as phases of their own.

The reads inside ``from_pretrained`` are already spans (``safe_open``, ``torch.load``,
the casts and copies); the rest of the call (importing the model's code, building the
model, converting and setting the weights, tying) was one block of time the report could
only ask the user to "wrap in finer phases", inside code the user does not own. Each step
that transformers exposes as a function is a span here, with its own phase
(``transformers.*`` in semconv), current while it runs, so the reads nest inside the step
that made them:

- ``transformers.from_pretrained``: the outermost ``from_pretrained`` on a thread (an Auto
  class's or ``PreTrainedModel``'s); its own time is what no step covers (config, Hub
  look-ups, generation config);
- ``transformers.import_model_code``: an Auto class resolving the model class
  (``auto_factory._get_model_class``, ``get_class_from_dynamic_module`` for remote code):
  the first one in a process imports ``modeling_<type>`` and, through it, most of
  transformers and torch's optional packages;
- ``download`` (span ``coldstart.transformers.resolve_checkpoint_files``): finding the
  checkpoint files, downloading what the Hub cache lacks;
- ``transformers.build_model``: ``cls(config)`` inside the init contexts
  ``PreTrainedModel.get_init_context`` returns (a context of ours is put first in that list,
  so the span is exactly the ``with`` block);
- ``transformers.weight_conversions`` (5.x): ``get_model_conversion_mapping``;
- ``transformers.load_weights``: ``PreTrainedModel._load_pretrained_model``;
- ``transformers.init_missing_weights``: ``_initialize_missing_keys``;
- ``transformers.tie_weights``: ``PreTrainedModel.tie_weights`` (the outermost call);
- ``transformers.dispatch``: accelerate's dispatch for a multi-device or offloading
  ``device_map`` (``accelerate_dispatch`` in 5.x, ``dispatch_model`` in 4.x).

Steps are recorded only inside a ``from_pretrained`` call on the same thread (``tie_weights``
after ``resize_token_embeddings`` is not a load step); a hook point missing from the
installed version is skipped, so an older or newer transformers loses that step's name,
never the load (docs/frameworks.md: the versions checked). Nothing is added per tensor: a
fixed number of spans per ``from_pretrained``. transformers' exceptions pass through
untouched (the span records them). Not on the hot path: a model loaded after ``ready()``
gets its steps marked ``coldstart.after_ready``.
"""

from __future__ import annotations

import sys
import threading
from typing import Literal

from .. import semconv, session as _session
from .._errors import internal_errors, report_internal_error
from ._wrapping import PatchSet, installed_version

MODELING_UTILS = "transformers.modeling_utils"
AUTO_FACTORY = "transformers.models.auto.auto_factory"
MODELING_AUTO = "transformers.models.auto.modeling_auto"  # where the Auto classes are made

TARGETS = (MODELING_UTILS, AUTO_FACTORY, MODELING_AUTO)
HOT_PATH = False  # a handful of calls per from_pretrained

_patches = PatchSet()
is_patched, unpatch = _patches.is_patched, _patches.restore  # the patch module protocol (patches/__init__.py)


def get_version() -> str | None:
    return installed_version("transformers")


def patch() -> None:
    # Each target arrives on its own (modeling_utils is often imported inside the first
    # from_pretrained, by the Auto class resolving the model): wrap what is there now;
    # PatchSet skips what is wrapped already.
    modeling_utils = sys.modules.get(MODELING_UTILS)
    if modeling_utils is not None:
        model = getattr(modeling_utils, "PreTrainedModel", None)
        if model is not None:
            _patches.wrap(model, "from_pretrained", _model_from_pretrained)
            _patches.wrap(model, "get_init_context", _init_contexts)
            _patches.wrap(model, "_load_pretrained_model", _LOAD_WEIGHTS)
            _patches.wrap(model, "_initialize_missing_keys", _INIT_MISSING)
            _patches.wrap(model, "tie_weights", _TIE_WEIGHTS)
        # Module-level names transformers calls through its own module's globals: wrapping the
        # name there changes transformers' call only (accelerate's dispatch_model stays as it is).
        _patches.wrap(modeling_utils, "_get_resolved_checkpoint_files", _RESOLVE_CHECKPOINT)
        _patches.wrap(modeling_utils, "get_model_conversion_mapping", _WEIGHT_CONVERSIONS)
        _patches.wrap(modeling_utils, "accelerate_dispatch", _DISPATCH)
        _patches.wrap(modeling_utils, "dispatch_model", _DISPATCH)
    auto_factory = sys.modules.get(AUTO_FACTORY)
    if auto_factory is not None:
        # Every Auto class's from_pretrained is a copy of the base's function sharing its
        # module globals (auto_class_update), so the resolution is wrapped once, here.
        _patches.wrap(auto_factory, "_get_model_class", _RESOLVE_MODEL_CLASS)
        _patches.wrap(auto_factory, "get_class_from_dynamic_module", _RESOLVE_MODEL_CLASS)
        base = getattr(auto_factory, "_BaseAutoModelClass", None)
        if isinstance(base, type):
            for auto_class in _with_subclasses(base):
                if "from_pretrained" in vars(auto_class):
                    _patches.wrap(auto_class, "from_pretrained", _auto_from_pretrained)


def _with_subclasses(cls: type) -> list[type]:
    found, todo = [], [cls]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.append(current)
        try:
            todo.extend(current.__subclasses__())
        except TypeError:
            pass
    return found


class _Here:
    """This thread's from_pretrained in this start-up: the outermost call, and the steps
    open on the thread (a step that calls itself is recorded at its outermost call)."""

    __slots__ = ("call", "open")

    def __init__(self) -> None:
        self.call: _Call | None = None
        self.open: list[str] = []


class _Call:
    __slots__ = ("here", "container", "attributes", "seen")

    def __init__(self, here: _Here, container) -> None:
        self.here = here
        self.container = container
        self.attributes: dict = {}
        self.seen: set[str] = set()  # the steps recorded in this call so far


def _here(session) -> _Here:
    local = session.state(__name__, threading.local)  # per start-up, then per thread
    here = getattr(local, "here", None)
    if here is None:
        here = local.here = _Here()
    return here


# --- from_pretrained ---------------------------------------------------------------------


def _model_from_pretrained(wrapped, instance, args, kwargs):
    return _from_pretrained(wrapped, args, kwargs, model_class=instance)


def _auto_from_pretrained(wrapped, instance, args, kwargs):
    return _from_pretrained(wrapped, args, kwargs, model_class=None)


def _from_pretrained(wrapped, args, kwargs, model_class):
    call = _open_call(model_class)
    if call is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        _close_call(call, error)
        raise
    _close_call(call, None)
    return result


def _open_call(model_class) -> _Call | None:
    """The outermost from_pretrained on this thread opens the call's span; a nested one
    (the Auto class calling the model class's) only names the model class on it."""
    session = _session.ACTIVE
    if session is None:
        return None
    with internal_errors("transformers: from_pretrained start"):
        here = _here(session)
        if here.call is None:
            version = getattr(sys.modules.get("transformers"), "__version__", None)
            attrs = {semconv.TF_VERSION: version} if isinstance(version, str) else {}
            here.call = _Call(here, session.start_container(semconv.PHASE_TF_FROM_PRETRAINED, attrs))
            _note_model_class(here.call, model_class)
            return here.call
        _note_model_class(here.call, model_class)
    return None


def _note_model_class(call: _Call, model_class) -> None:
    name = getattr(model_class, "__name__", None)
    if isinstance(model_class, type) and isinstance(name, str):
        call.attributes[semconv.TF_MODEL_CLASS] = name


def _close_call(call: _Call, error: BaseException | None) -> None:
    call.here.call = None
    call.here.open.clear()
    with internal_errors("transformers: from_pretrained end"):
        call.container.finish(call.attributes, error=error)


# --- steps ------------------------------------------------------------------------------------


class _Step:
    __slots__ = ("here", "container", "phase")

    def __init__(self, here: _Here, container, phase: str) -> None:
        self.here = here
        self.container = container
        self.phase = phase

    def close(self, attributes: dict | None = None, error: BaseException | None = None) -> None:
        with internal_errors(f"transformers: {self.phase} end"):
            if self.phase in self.here.open:
                self.here.open.remove(self.phase)
            self.container.finish(attributes, error=error)


def _open_step(phase: str, attributes: dict | None = None, name: str | None = None,
               once_per_call: bool = False) -> _Step | None:
    """The step's live span; None when not inside from_pretrained on this thread, inside
    the same step already, or (``once_per_call``) recorded in this call already."""
    session = _session.ACTIVE
    if session is None:
        return None
    try:
        here = _here(session)
        call = here.call
        if call is None or phase in here.open or (once_per_call and phase in call.seen):
            return None
        step = _Step(here, session.start_container(phase, attributes, name=name), phase)
        here.open.append(phase)
        call.seen.add(phase)
        return step
    except Exception:
        report_internal_error(f"transformers: {phase} start")
        return None


def _step(phase: str, name: str | None = None, once_per_call: bool = False, describe=None):
    """A wrapper recording each call as the step ``phase``; ``describe(result, modules
    before)`` gives the attributes known once it returned."""

    def step_wrapper(wrapped, instance, args, kwargs):
        step = _open_step(phase, name=name, once_per_call=once_per_call)
        if step is None:
            return wrapped(*args, **kwargs)
        modules_before = len(sys.modules)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as error:
            step.close(error=error)
            raise
        attributes = None
        if describe is not None:
            with internal_errors(f"transformers: {phase} attributes"):
                attributes = describe(result, modules_before)
        step.close(attributes)
        return result

    step_wrapper.__name__ = f"_{phase.rsplit('.', 1)[-1]}"
    return step_wrapper


def _model_class_attributes(model_class, modules_before: int) -> dict:
    # Modules imported meanwhile by any thread count too: an upper bound, said so in semconv.
    attrs: dict = {semconv.TF_MODULES_IMPORTED: max(0, len(sys.modules) - modules_before)}
    name, module = getattr(model_class, "__name__", None), getattr(model_class, "__module__", None)
    if isinstance(model_class, type) and isinstance(name, str) and isinstance(module, str):
        attrs[semconv.TF_MODEL_CLASS] = name
        attrs[semconv.TF_MODEL_MODULE] = module
    return attrs


_LOAD_WEIGHTS = _step(semconv.PHASE_TF_LOAD_WEIGHTS)
_INIT_MISSING = _step(semconv.PHASE_TF_INIT_MISSING)
_TIE_WEIGHTS = _step(semconv.PHASE_TF_TIE_WEIGHTS)
_WEIGHT_CONVERSIONS = _step(semconv.PHASE_TF_WEIGHT_CONVERSIONS)
_DISPATCH = _step(semconv.PHASE_TF_DISPATCH)
_RESOLVE_CHECKPOINT = _step(semconv.PHASE_DOWNLOAD, name=semconv.SPAN_TF_RESOLVE_CHECKPOINT)
# The Auto class finding the model class: the first call of a from_pretrained imports its
# module; 5.x asks again (a dictionary look-up), which gets no span.
_RESOLVE_MODEL_CLASS = _step(semconv.PHASE_TF_IMPORT_MODEL_CODE, once_per_call=True,
                             describe=_model_class_attributes)


# --- building the model: a context of ours first in transformers' init contexts ---------------


def _init_contexts(wrapped, instance, args, kwargs):
    contexts = wrapped(*args, **kwargs)
    session = _session.ACTIVE
    if session is None or not isinstance(contexts, list):
        return contexts
    try:
        if _here(session).call is None:
            return contexts
        # First, so the span covers entering and leaving the others too (torch.device("meta"),
        # no_init_weights, DeepSpeed's zero.Init); a new list, the host's stays as it was.
        return [_BuildModel(_meta_init(contexts))] + contexts
    except Exception:
        report_internal_error("transformers: init contexts")
        return contexts


def _meta_init(contexts: list) -> bool:
    """Whether these init contexts build on the meta device: ``torch.device("meta")``
    (5.x) or accelerate's ``init_empty_weights()`` (4.x)."""
    torch = sys.modules.get("torch")
    device = getattr(torch, "device", None)
    for context in contexts:
        if isinstance(device, type) and isinstance(context, device) and getattr(context, "type", None) == "meta":
            return True
        func = getattr(context, "func", None)  # a @contextmanager's function
        if getattr(func, "__name__", None) == "init_empty_weights":
            return True
    return False


class _BuildModel:
    __slots__ = ("meta_init", "step")

    def __init__(self, meta_init: bool) -> None:
        self.meta_init = meta_init
        self.step: _Step | None = None

    def __enter__(self):
        self.step = _open_step(semconv.PHASE_TF_BUILD_MODEL, {semconv.TF_META_INIT: self.meta_init})
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        step, self.step = self.step, None
        if step is not None:
            step.close(error=exc)
        return False  # the host's exception (if any) goes on as it was
