"""The per-call path (issue 24): cheap, and still right.

Each intercepted call while the start-up is open does one thread-local lookup, two clock
reads, a byte count and an addition to its thread's aggregate; its parent comes from a
per-thread cache checked by identity, and storage-read counters are sampled around calls
only once storage reads are expected. These tests hold the figures to what they were:
every call lands under the parent current at its call (user spans, pending ``Module.to``
parents, ``safe_open`` ambient parents, thread-pool work), no call is lost or counted twice
when its aggregate is written by another thread meanwhile, reads from storage are counted
where they happen, no syscall is made per call otherwise, and copies on other threads during
a compile are recorded (issue 23, finding 9).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import otel_coldstart
from otel_coldstart import probes, semconv, session as _session

F16, BF16 = torch.float16, torch.bfloat16


def _aggregates(traced, phase=semconv.PHASE_CAST):
    return [s for s in traced.by_phase(phase) if s.attributes.get(semconv.AGGREGATE)]


def _calls_by_parent(traced, phase=semconv.PHASE_CAST) -> dict:
    found: dict = {}
    for span in _aggregates(traced, phase):
        found[span.parent.span_id] = found.get(span.parent.span_id, 0) + span.attributes[semconv.CALLS]
    return found


def _root_id() -> int:
    return _session.ACTIVE.root_context.span_id


def test_each_call_joins_the_span_current_at_its_call(traced):
    """The parent is cached per thread under the OTel context object: entering and leaving
    the host's spans (the same context object comes back after a detach) moves the calls."""
    tracer = traced.provider.get_tracer("host")
    t = torch.ones(8, dtype=BF16)
    root = _root_id()
    t.to(F16)
    with tracer.start_as_current_span("outer") as outer:
        t.to(F16)
        with tracer.start_as_current_span("inner") as inner:
            t.to(F16)
            t.to(F16)
        t.to(F16)
    t.to(F16)
    with otel_coldstart.phase("mine"):
        t.to(F16)
    otel_coldstart.ready()
    (mine,) = traced.named("coldstart.mine")
    assert _calls_by_parent(traced) == {root: 2, outer.get_span_context().span_id: 2,
                                        inner.get_span_context().span_id: 2, mine.context.span_id: 1}


def test_shard_and_module_parents_take_over_and_give_back_under_a_warm_cache(traced, small_checkpoint):
    """Ambient safe_open parents and pending Module.to parents change without any context
    change: the session's parent generation makes the cached parent stale each time."""
    path = small_checkpoint[0]
    t = torch.ones(8, dtype=BF16)
    model = torch.nn.Linear(4, 4, dtype=BF16)
    t.to(F16)  # the root, cached
    with safe_open(path, framework="pt") as handle:
        key = next(iter(handle.keys()))
        w = handle.get_tensor(key)
        w.to(F16)  # the shard
        model.to(F16)  # Module.to, inside the shard
        w.to(F16)  # the shard again
    w.to(F16)  # the root again: the handle's ambient parent closed
    otel_coldstart.ready()
    (shard,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    (module_to,) = traced.named(semconv.SPAN_MODULE_TO)
    assert module_to.parent.span_id == shard.context.span_id
    assert _calls_by_parent(traced) == {_root_id(): 2, shard.context.span_id: 2, module_to.context.span_id: 2}


def test_thread_pool_work_nests_under_the_submitter_and_keeps_its_thread(traced):
    tensors = [torch.full((16,), i, dtype=BF16) for i in range(40)]
    with otel_coldstart.phase("pool"):
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            results = list(pool.map(lambda x: x.to(F16), tensors))
    otel_coldstart.ready()
    (phase,) = traced.named("coldstart.pool")
    aggregates = _aggregates(traced)
    assert {s.parent.span_id for s in aggregates} == {phase.context.span_id}
    assert sum(s.attributes[semconv.CALLS] for s in aggregates) == 40
    assert sum(s.attributes[semconv.BYTES] for s in aggregates) == 40 * 16 * 2
    assert threading.get_ident() not in {s.attributes[semconv.THREAD_ID] for s in aggregates}
    assert all(r.dtype == F16 for r in results)


def test_no_call_is_lost_or_counted_twice_when_its_aggregate_is_written_meanwhile(traced):
    """Workers cast under a phase that the main thread ends while they go on (their calls
    keep its span as parent): each aggregate is closed under its thread's lock, so every call
    is in exactly one written aggregate."""
    from opentelemetry import context as otel_context

    calls_per_worker, workers = 3000, 3
    t = torch.ones(4, dtype=BF16)
    under_way = threading.Barrier(workers + 1)

    def work(context):
        token = otel_context.attach(context)  # the phase's context, as a pool would carry it
        try:
            for number in range(calls_per_worker):
                t.to(F16)
                if number == 100:
                    under_way.wait()
        finally:
            otel_context.detach(token)

    with otel_coldstart.phase("shared"):
        threads = [threading.Thread(target=work, args=(otel_context.get_current(),)) for _ in range(workers)]
        for thread in threads:
            thread.start()
        under_way.wait()  # every worker is casting: the phase ends under them
    written_at_phase_end = sum(s.attributes[semconv.CALLS] for s in _aggregates(traced))
    for thread in threads:
        thread.join()
    otel_coldstart.ready()
    aggregates = _aggregates(traced)
    assert 0 < written_at_phase_end < workers * calls_per_worker  # the race really happened
    assert sum(s.attributes[semconv.CALLS] for s in aggregates) == workers * calls_per_worker
    assert sum(s.attributes[semconv.BYTES] for s in aggregates) == workers * calls_per_worker * 8
    (phase,) = traced.named("coldstart.shared")
    assert {s.parent.span_id for s in aggregates} == {phase.context.span_id}


def test_fake_tensors_record_nothing(traced):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(64, dtype=BF16)
        fake.to(F16)
        torch.empty(64, dtype=F16).copy_(fake)
    otel_coldstart.ready()
    assert _aggregates(traced) == [] and _aggregates(traced, semconv.PHASE_H2H) == []


# --- storage-read counters: where reads can happen, not per call ---------------------------------


@pytest.fixture
def getrusage_calls(monkeypatch):
    """Counts the syscalls behind probes.thread_io (the per-thread storage-read counters)."""
    if not probes.io_accounting_available():
        pytest.skip("no per-thread I/O accounting on this platform")
    calls = []
    real = probes._getrusage

    def counting(who):
        calls.append(who)
        return real(who)

    monkeypatch.setattr(probes, "_getrusage", counting)
    return calls


def _warm_shard(tmp_path, tensors: int) -> str:
    path = str(tmp_path / "warm.safetensors")
    save_file({f"w{i}": torch.full((64,), i, dtype=BF16) for i in range(tensors)}, path)
    with open(path, "rb") as handle:
        handle.read()
    return path


@pytest.fixture
def code_paths_warm(traced, tmp_path):
    """A warm load means warm code too. On a fresh machine the first cast or copy in a process
    can fault its kernel in from libtorch's file on storage, and the plugin's own first file
    may import a module of ours; the read detector rightly cannot tell those reads from a
    checkpoint's and turns per-call counting on (a CI run counted 1,201 calls for that
    reason). So the same calls run once in a start-up of their own, which is then replaced by
    a fresh one (a new recorder, nothing exported yet) for the test."""
    warmup = tmp_path / "code-warm-up"
    warmup.mkdir()
    with otel_coldstart.phase("load"):
        with safe_open(_warm_shard(warmup, 2), framework="pt") as handle:
            for key in handle.keys():
                torch.empty(64, dtype=F16).copy_(handle.get_tensor(key).to(F16))
                handle.get_slice(key)[:32]
    otel_coldstart.ready()
    traced.reinstrument()
    traced.exporter.clear()
    return traced


def test_a_warm_load_makes_no_syscall_per_tensor(code_paths_warm, tmp_path, getrusage_calls):
    """200 get_tensor + 200 casts + 200 copy_ from a file wholly in the page cache: the
    counters are read per file and per boundary, never per call (main read them 1,200 times)."""
    traced = code_paths_warm
    path = _warm_shard(tmp_path, 200)
    with otel_coldstart.phase("load"):
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                loaded = handle.get_tensor(key)
                torch.empty(64, dtype=F16).copy_(loaded.to(F16))
    otel_coldstart.ready()
    assert len(getrusage_calls) < 20, len(getrusage_calls)
    (cast,) = _aggregates(traced)
    assert cast.attributes[semconv.CALLS] == 200 and cast.attributes[semconv.IO_READ_BYTES] == 0
    (shard,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert shard.attributes[semconv.BYTES] == 200 * 64 * 2


def test_warm_slices_make_no_syscall_per_slice(code_paths_warm, tmp_path, getrusage_calls):
    """get_slice(...)[...] is the per-tensor read of loaders that shard a tensor on load: its
    wrapper, like get_tensor's, reads the counters per file, not per slice (main read them 600 times)."""
    traced = code_paths_warm
    path = _warm_shard(tmp_path, 200)
    with otel_coldstart.phase("load"):
        with safe_open(path, framework="pt") as handle:
            parts = [handle.get_slice(key)[:32] for key in handle.keys()]
    otel_coldstart.ready()
    assert len(getrusage_calls) < 20, len(getrusage_calls)
    assert sorted(int(p[0]) for p in parts) == list(range(200))
    (shard,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert shard.attributes[semconv.BYTES] == 200 * 32 * 2


def _evicted_or_skip(path: str) -> None:
    if not probes.read_bytes_trusted(path):
        pytest.skip(f"no trustworthy per-thread read accounting for {probes.filesystem_type(path)}")
    probes.evict_from_page_cache(path)
    ratio = probes.resident_ratio(path)
    if ratio is None or ratio > 0.2:
        pytest.skip(f"this filesystem keeps evicted pages resident (resident ratio {ratio})")


def test_casts_of_a_cold_mapped_file_count_its_reads_per_call(traced, tmp_path, getrusage_calls):
    """torch.load(mmap=True) of an evicted file reads nothing in its call: the pages come in
    during the casts, which count them (the file was not resident: sampling per call is on)."""
    path = str(tmp_path / "cold.pt")
    # 64 x 64 KiB: each cast below torch's parallel grain (32768 elements), so the calling
    # thread faults the pages itself (the counters are per thread; intra-op threads' are not).
    torch.save({f"w{i}": torch.randn(1 << 14) for i in range(64)}, path)
    _evicted_or_skip(path)
    state = torch.load(path, weights_only=True, mmap=True)
    with otel_coldstart.phase("casts"):
        for value in state.values():
            value.to(F16)
    otel_coldstart.ready()
    (cast,) = _aggregates(traced)
    assert cast.attributes[semconv.CALLS] == 64
    assert cast.attributes[semconv.IO_READ_BYTES] >= 0.5 * os.path.getsize(path)
    assert len(getrusage_calls) >= 2 * 64  # around each cast


def test_reads_from_a_file_we_did_not_see_turn_per_call_counting_on_at_a_boundary(traced, tmp_path):
    """A mapped file opened where no hook of ours sees it (torch.from_file): its reads in the
    first phase are not attributed (nothing said whose they were), the phase's end sees the
    thread read from storage, and the next phase's casts count theirs."""
    first, second = str(tmp_path / "a.bin"), str(tmp_path / "b.bin")
    for path in (first, second):
        with open(path, "wb") as handle:
            handle.write(os.urandom(8 << 20))
        _evicted_or_skip(path)
    recorder = _session.ACTIVE.recorder
    assert recorder.sample_io is False
    def cast_in_pieces(path):  # pieces below torch's parallel grain: this thread faults the pages
        mapped = torch.from_file(path, shared=True, size=(8 << 20) // 4, dtype=torch.float32)
        for piece in mapped.split(1 << 14):
            piece.to(F16)

    with otel_coldstart.phase("unseen"):
        cast_in_pieces(first)
    assert recorder.sample_io is True
    with otel_coldstart.phase("counted"):
        cast_in_pieces(second)
    otel_coldstart.ready()
    (unseen,) = traced.named("coldstart.unseen")
    (counted,) = traced.named("coldstart.counted")
    by_parent = {s.parent.span_id: s for s in _aggregates(traced)}
    assert by_parent[unseen.context.span_id].attributes[semconv.IO_READ_BYTES] == 0
    assert by_parent[counted.context.span_id].attributes[semconv.IO_READ_BYTES] >= 4 << 20


# --- a compile on one thread, real copies on another (issue 23, finding 9) ------------------------


def test_copies_on_another_thread_during_a_compile_are_recorded(traced):
    """torch 2.13's compiling flag is process-wide: a compile on one thread used to hide every
    copy of every other thread. The compile's own (fake) casts stay unrecorded."""
    compiling, release = threading.Event(), threading.Event()

    def blocking_backend(graph_module, example_inputs):
        compiling.set()  # inside the compile: the flag is up, this thread holds its contexts
        release.wait(60)
        return graph_module.forward

    @torch.compile(backend=blocking_backend, fullgraph=True)
    def cast(x):
        return x.to(F16) * 2

    outcome = {}
    compiler = threading.Thread(target=lambda: outcome.setdefault("y", cast(torch.ones(32, dtype=BF16))))
    compiler.start()
    assert compiling.wait(120), "the compile never reached the backend"
    assert torch.compiler.is_compiling()  # process-wide: this thread sees it too
    t = torch.ones(64, dtype=BF16)
    for _ in range(10):
        t.to(F16)
    release.set()
    compiler.join(120)
    otel_coldstart.ready()
    assert outcome["y"].dtype == F16
    here = [s for s in _aggregates(traced) if s.attributes[semconv.THREAD_ID] == threading.get_ident()]
    assert sum(s.attributes[semconv.CALLS] for s in here) == 10
    assert sum(s.attributes[semconv.BYTES] for s in here) == 10 * 64 * 2
    # The compiling thread: at most the compiled function's real run (its graph calls .to).
    elsewhere = [s for s in _aggregates(traced) if s.attributes[semconv.THREAD_ID] != threading.get_ident()]
    assert sum(s.attributes[semconv.CALLS] for s in elsewhere) <= 1


def test_a_pin_copy_is_one_aggregate_with_its_bytes(traced):
    """Tensor.pin_memory's wrapper over a stand-in for the copy (a CPU build cannot pin):
    timed and counted as tensor_ops times a host call, once however it re-enters."""
    from otel_coldstart.patches import pinning

    wrapper = pinning._pin_copy("Tensor.pin_memory")
    source = torch.ones(64, dtype=BF16)
    with otel_coldstart.phase("pins"):
        for _ in range(3):
            assert wrapper(lambda: source.clone(), source, (), {}).dtype == BF16
        assert wrapper(lambda: source, source, (), {}) is source  # already pinned: nothing
    otel_coldstart.ready()
    (pins,) = [s for s in traced.by_phase(semconv.PHASE_PIN) if s.attributes.get(semconv.AGGREGATE)]
    assert pins.attributes[semconv.CALLS] == 3 and pins.attributes[semconv.BYTES] == 3 * 64 * 2
    assert pins.attributes[semconv.PIN_KIND] == semconv.PIN_KIND_COPY
