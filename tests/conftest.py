"""Shared fixtures. Every test runs against real torch and safetensors.

Internal errors of the plugin are swallowed in production (the host comes first) but must
fail the test suite loudly: ``_fail_on_internal_errors`` checks after every test.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from otel_coldstart import _errors

# `make test-fast` runs the property tests with a fifth of their examples (--hypothesis-profile
# quick; tests/_examples.py scales the explicit counts); `make test`, which CI runs, keeps the
# default profile and every count as written.
settings.register_profile("quick", max_examples=20)


@pytest.fixture(autouse=True)
def _fail_on_internal_errors(request):
    _errors.INTERNAL_ERRORS.clear()
    yield
    if request.node.get_closest_marker("internal_errors_expected"):
        _errors.INTERNAL_ERRORS.clear()
        return
    errors = list(_errors.INTERNAL_ERRORS)
    _errors.INTERNAL_ERRORS.clear()
    assert not errors, f"otel-coldstart internal errors: {errors}"


@pytest.fixture(autouse=True)
def _processes_only_where_marked(request, monkeypatch):
    """A test that starts a fresh process must say so (``process`` marker): `make test-fast`
    leaves those out, and its budget depends on the mark being right. Starting one without it
    fails here, with the test's name."""
    if request.node.get_closest_marker("process"):
        yield
        return
    import _posixsubprocess
    import subprocess

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} starts a process: mark it `@pytest.mark.process` "
                             "(or its module, `pytestmark = pytest.mark.process`, if all its tests do)")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    # multiprocessing's spawn and forkserver start their children here, not through Popen.
    monkeypatch.setattr(_posixsubprocess, "fork_exec", refuse)
    yield


@pytest.fixture
def traced():
    """Instrument with an in-memory exporter; yields a helper with the finished spans.

    The start-up starts at instrument() (not at the pytest process start), prints nothing,
    and is uninstrumented afterwards whatever the test did.
    """
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_coldstart

    otel_coldstart.uninstrument()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    helper = _Traced(exporter, provider)
    helper.reinstrument()
    try:
        yield helper
    finally:
        otel_coldstart.uninstrument()


class _Traced:
    def __init__(self, exporter, provider) -> None:
        self.exporter = exporter
        self.provider = provider

    def reinstrument(self) -> None:
        import otel_coldstart

        otel_coldstart.uninstrument()
        otel_coldstart.instrument(tracer_provider=self.provider, start_at="instrument", summary=False,
                                  handle_sigterm=False)

    def spans(self):
        return list(self.exporter.get_finished_spans())

    def by_phase(self, phase: str):
        return [s for s in self.spans() if s.attributes.get("coldstart.phase") == phase]

    def named(self, name: str):
        return [s for s in self.spans() if s.name == name]

    def records(self):
        """The finished spans as analyzer records (what a trace file would hold)."""
        from otel_coldstart import session

        active = session.ACTIVE
        return active.records() if active is not None else []


def pytest_configure(config):
    config.addinivalue_line("markers", "internal_errors_expected: the test injects an internal error on purpose")
    # `make test-fast` leaves these out: tests that start fresh Python processes (a real exit,
    # signal, fork or evicted cache seen from outside). New such tests carry the mark.
    config.addinivalue_line("markers", "process: the test starts fresh Python processes (left out of test-fast)")
    # Tests that compare one measured start-up time with another (a projection against the
    # start-up it predicts): `make validate` runs them alone (`make test` leaves them out), so
    # that the other tests' processes do not load the 2 cores they measure on.
    config.addinivalue_line("markers", "timing: compares measured times; run alone by `make validate`")
    # Scheduling only: `make test` starts these first (see pytest_collection_modifyitems below).
    config.addinivalue_line("markers", "slow: takes tens of seconds of CPU (started first by `make test`)")
    if config.getoption("dist", default=None) == "loadgroup" and not _xdist_names_groups():  # None: no xdist
        raise pytest.UsageError(
            f"pytest {pytest.__version__} keeps a test's id where pytest-xdist's loadgroup does not write "
            "its group: every test would be scheduled alone, each file's fixtures set up on both workers "
            "(requirements-dev.txt pins pytest below 9.2 until xdist follows)")
    os.environ.setdefault("OTEL_COLDSTART_SUMMARY", "0")
    if not hasattr(config, "workerinput"):  # once, in the controller, before xdist starts its workers
        _compile_bytecode()


def _compile_bytecode() -> None:
    """Write the bytecode of the package, the tests and the benchmarks once, as pip does for an
    installed package. The suite starts hundreds of fresh processes; with the source editable
    and PYTHONDONTWRITEBYTECODE=1 (set on the project's machines) each of them compiled the
    package from source again: ~0.3 s of CPU a child, minutes over the suite. compileall
    writes whatever that variable says; a stale file is recompiled (its source's mtime is in
    the header), so what runs is always the source. Tests about bytecode set their own
    PYTHONPYCACHEPREFIX or PYTHONDONTWRITEBYTECODE and are not affected."""
    import compileall

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("otel_coldstart", "tests", "benchmarks", "examples"):
        directory = os.path.join(root, name)
        if os.path.isdir(directory):
            compileall.compile_dir(directory, quiet=2, workers=1)


SMALL_SHAPE_KWARGS = dict(vocab=512, hidden=64, intermediate=128, layers=2, shards=4)


@pytest.fixture(scope="session")
def fork_server(tmp_path_factory):
    """Children forked from a server that imported torch and safetensors once (tests/_forkserver.py):
    for process tests that need a host process, not a fresh interpreter. One per xdist worker."""
    from _forkserver import ForkServer

    server = ForkServer(str(tmp_path_factory.mktemp("fork-server")))
    yield server
    server.close()


@pytest.fixture(scope="session")
def small_checkpoint(tmp_path_factory):
    """A real 4-shard bf16 safetensors checkpoint with an HF index (about 300 KiB)."""
    from otel_coldstart.demo import LlamaShape, generate_checkpoint

    directory = tmp_path_factory.mktemp("ckpt")
    paths = generate_checkpoint(str(directory), LlamaShape(**SMALL_SHAPE_KWARGS))
    return [str(p) for p in paths]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """How `make test` (``--dist loadgroup --no-loadscope-reorder``) spreads the suite over its
    workers. A file's tests stay together on one worker, as ``loadfile`` had them (its module
    fixtures, a fork server or a served start-up, are set up once), unless the file says
    ``SPREAD_OVER_WORKERS = True`` (its tests share nothing: each is a group of its own) or a
    test names its group (``pytest.mark.xdist_group``: the ending matrix, 120 cases, is two).
    The groups run longest first: those with ``slow`` tests (tens of seconds each), then those
    that start processes, then the in-process ones, so that short groups fill in at the end
    instead of one long file running alone on one worker after the other has finished."""
    groups: dict[str, list] = {}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            spread = getattr(getattr(item, "module", None), "SPREAD_OVER_WORKERS", False)
            item.add_marker(pytest.mark.xdist_group(item.nodeid if spread else item.nodeid.split("::")[0]))
        groups.setdefault(next(item.iter_markers("xdist_group")).args[0], []).append(item)

    def longest_first(group: list) -> tuple[int, int]:
        return (-sum(1 for item in group if item.get_closest_marker("slow")),
                -sum(1 for item in group if item.get_closest_marker("process")))

    items[:] = [item for group in sorted(groups.values(), key=longest_first) for item in group]


def _xdist_names_groups() -> bool:
    """Whether ``--dist loadgroup`` can group: xdist's worker names each test's group by writing
    ``item._nodeid`` (a ``@group`` suffix the scheduler splits on), and pytest 9.2 reads a test's
    id from a structured ``Node.id`` instead, so the suffix was lost and every test scheduled
    alone (the benchmarks' 33 s smoke fixture ran on both workers)."""
    import inspect

    from _pytest import nodes
    from xdist import remote

    writes_old_id = "item._nodeid = " in inspect.getsource(remote.WorkerInteractor.pytest_collection_modifyitems)
    return not (writes_old_id and isinstance(getattr(nodes.Node, "id", None), property))
