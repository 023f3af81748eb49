"""Every span name, attribute, phase and metric name that otel-coldstart emits.

One place, so the code, the analyzer, the dashboards and ``docs/conventions.md`` cannot
drift apart (a test compares them). Attribute names live under ``coldstart.``; metric
names follow OTel conventions (units in the unit field, never in the name, so that
``model.startup.phase.duration`` with unit ``s`` becomes Prometheus'
``model_startup_phase_duration_seconds``).
"""

from __future__ import annotations

# --- span names -------------------------------------------------------------------------
SPAN_ROOT = "model.startup"
SPAN_PREFIX = "coldstart."  # every other span is "coldstart.<phase>" or "coldstart.<op>"
SPAN_MODULE_TO = "coldstart.module.to"
SPAN_LAUNCH = "coldstart.launch"  # a launcher's span, parent of every rank's model.startup


def phase_span_name(phase: str) -> str:
    return SPAN_PREFIX + phase


# --- phases (values of coldstart.phase) --------------------------------------------------
PHASE_IMPORT = "import"
PHASE_RUNTIME_INIT = "runtime_init"
PHASE_DOWNLOAD = "download"
PHASE_DESERIALIZE = "deserialize"
PHASE_ALLOCATE = "allocate"
PHASE_PIN = "pin"
PHASE_H2D = "h2d"
PHASE_D2H = "d2h"
PHASE_D2D = "d2d"
PHASE_H2H = "h2h"  # host-to-host copy_ (loading into preallocated CPU params)
PHASE_CAST = "cast"
PHASE_COMPILE = "compile"
PHASE_GRAPH_CAPTURE = "graph_capture"
PHASE_WARMUP = "warmup"

BUILTIN_PHASES = (
    PHASE_IMPORT,
    PHASE_RUNTIME_INIT,
    PHASE_DOWNLOAD,
    PHASE_DESERIALIZE,
    PHASE_ALLOCATE,
    PHASE_PIN,
    PHASE_H2D,
    PHASE_D2H,
    PHASE_D2D,
    PHASE_H2H,
    PHASE_CAST,
    PHASE_COMPILE,
    PHASE_GRAPH_CAPTURE,
    PHASE_WARMUP,
)

# The part of a start-up that no phase covers: a row of every breakdown and report, a budget
# key, the metric label for it, and the running phase while no span of ours is open. Spelled
# here only; no span carries it as its coldstart.phase.
UNATTRIBUTED = "unattributed"

# Built-in phases a user's phase("...") names by design: the plugin cannot see where a
# download or a warm-up starts, so these are the names to give them (docs/conventions.md).
USER_NAMED_PHASES = (PHASE_DOWNLOAD, PHASE_WARMUP)
# Names phase() refuses (ValueError): the phases the plugin records itself, and the part no
# phase covers. A user phase of one of these names mixed with ours in every report (two
# "unattributed" rows, a time.sleep given the import advice). TRANSFORMERS_PHASES are
# added below, where they are defined.
RESERVED_PHASE_NAMES: tuple = tuple(p for p in BUILTIN_PHASES if p not in USER_NAMED_PHASES) + (UNATTRIBUTED,)

# --- attributes ---------------------------------------------------------------------------
PHASE = "coldstart.phase"
READY = "coldstart.ready"
END_REASON = "coldstart.end_reason"  # see END_* below
END_READY = "ready"  # ready() was called
END_EXIT = "exit"  # the process exited normally (or by sys.exit) before ready()
END_EXCEPTION = "exception"  # an uncaught exception ended the process before ready()
END_SIGTERM = "sigterm"  # SIGTERM ended the process before ready()
END_UNINSTRUMENTED = "uninstrumented"  # uninstrument() before ready()
END_EXCEPTION_TYPE = "coldstart.end.exception_type"  # root, when the end reason is exception
END_PHASE = "coldstart.end.phase"  # root: the phase that was running when the start-up was cut short
# Set (true) on every span the end of the start-up cut short: a phase, file read, graph
# capture or aggregate still open at exit, SIGTERM or uninstrument() (or, for a start-up
# killed with SIGKILL, at its last progress record, where the analyzer ends it). It ends there.
INTERRUPTED = "coldstart.interrupted"
# Root: OS evidence this platform could not give, "probe: reason" each (e.g. no
# per-thread I/O counters on macOS); the spans and timings are there, that evidence is not.
EVIDENCE_UNAVAILABLE = "coldstart.evidence.unavailable"
AFTER_READY = "coldstart.after_ready"
AGGREGATE = "coldstart.aggregate"  # true on leaf spans that summarise many calls

FILE_PATH = "coldstart.file.path"
FILE_SIZE = "coldstart.file.size"
FILE_FORMAT = "coldstart.file.format"  # safetensors | torch_zip | torch_legacy
FILE_API = "coldstart.file.api"  # the call that read it, e.g. safetensors.safe_open
SHARD_INDEX = "coldstart.shard.index"
SHARD_COUNT = "coldstart.shard.count"
# Small checkpoint files folded into one aggregate per (parent, api) instead of a span each
# (patches/_folded_files.py): the aggregate's coldstart.calls is its files, coldstart.bytes
# their tensors' bytes, coldstart.file.size their sizes summed, coldstart.cache.storage_read_bytes
# the bytes storage delivered to them; the files' cache verdicts counted by state.
FILES_FOLDED = "coldstart.files.folded"  # true on such an aggregate
FILES_COLD = "coldstart.files.cold"
FILES_PARTIAL = "coldstart.files.partial"
FILES_WARM = "coldstart.files.warm"
FILES_CACHE_UNKNOWN = "coldstart.files.cache_unknown"  # no honest verdict (an untrusted filesystem)
FILES_FAILED = "coldstart.files.failed"  # reads that raised (the host got the error)
FILES_FOLD_BELOW = "coldstart.files.fold_below_bytes"  # the size under which a file may fold

CACHE_RESIDENT_RATIO = "coldstart.cache.resident_ratio"
CACHE_STATE = "coldstart.cache.state"  # cold | warm | partial
CACHE_EVIDENCE = "coldstart.cache.evidence"  # "+"-joined: read_bytes, mincore, residency_delta[_after_open]
# Bytes of the file that came from storage during the start-up, whatever thread read them and
# whenever (from the file's page-cache residency before its first read to when it is settled).
CACHE_STORAGE_READ_BYTES = "coldstart.cache.storage_read_bytes"
CACHE_STORAGE_READ_UNKNOWN = "coldstart.cache.storage_read_unknown"  # why that figure is absent
# The part of it read after the file's span ended (first touches of a mapped file by later work).
CACHE_STORAGE_READ_AFTER_SPAN_BYTES = "coldstart.cache.storage_read_after_span_bytes"
CACHE_SETTLED_RESIDENT_RATIO = "coldstart.cache.settled_resident_ratio"  # residency when it was settled
IO_READ_BYTES = "coldstart.io.read_bytes"
IO_MAJOR_FAULTS = "coldstart.io.major_faults"
THROUGHPUT = "coldstart.throughput"  # bytes/s over the span's duration

BYTES = "coldstart.bytes"
CALLS = "coldstart.calls"
BUSY_S = "coldstart.busy_s"
TENSORS = "coldstart.tensors"
CAST_FROM = "coldstart.cast.from"
CAST_TO = "coldstart.cast.to"
COPY_PINNED_BYTES = "coldstart.copy.pinned_bytes"
COPY_PAGEABLE_BYTES = "coldstart.copy.pageable_bytes"
COPY_NON_BLOCKING_CALLS = "coldstart.copy.non_blocking_calls"

TORCH_LOAD_STORAGE_READ_S = "coldstart.torch_load.storage_read_s"
TORCH_LOAD_STORAGE_READS = "coldstart.torch_load.storage_reads"
TORCH_LOAD_MMAP = "coldstart.torch_load.mmap"

RANK = "coldstart.rank"
WORLD_SIZE = "coldstart.world_size"
LOCAL_RANK = "coldstart.local_rank"  # the rank on its node (which GPU, usually)
PROCESS_START_SOURCE = "coldstart.process_start.source"  # proc | instrument
# On the coldstart.import span: otel-coldstart's own part of it (importing otel_coldstart and
# what it pulls in that was not imported yet, plus instrument() up to the span's end), so the
# analyzer never advises "import less" about the plugin's own cost.
IMPORT_OWN_S = "coldstart.import.own_s"
# On the root span, when the start-up ends: the plugin's own cost (own_cost.py), in seconds:
# the whole, its set-up (import + instrument()), its threads' CPU time, and its work on the
# host's threads by the phase it landed in (coldstart.own_cost.phase.<phase>_s).
OWN_COST_S = "coldstart.own_cost_s"
OWN_COST_SETUP_S = "coldstart.own_cost.setup_s"
OWN_COST_THREADS_CPU_S = "coldstart.own_cost.threads_cpu_s"
OWN_COST_PHASE_PREFIX = "coldstart.own_cost.phase."
# On an `otel-coldstart run` launch span: how many Python processes of the command started the
# plugin, and why each of the others did not ("<interpreter> cannot import otel_coldstart (...)").
LAUNCH_PROCESSES_STARTED = "coldstart.launch.processes_started"
LAUNCH_PROCESSES_NOT_STARTED = "coldstart.launch.processes_not_started"

# Standard OTel attributes we set (general semantic conventions).
THREAD_ID = "thread.id"
THREAD_NAME = "thread.name"

CACHE_COLD = "cold"
CACHE_WARM = "warm"
CACHE_PARTIAL = "partial"

FORMAT_SAFETENSORS = "safetensors"
FORMAT_TORCH_ZIP = "torch_zip"
FORMAT_TORCH_LEGACY = "torch_legacy"

# --- third round: span times are the work's times, durable as it goes (startup.py) ----------
# Standard OTel attribute (general semantic conventions): on a span whose work failed (a
# checkpoint read that raised), with status ERROR, the exception's fully qualified type.
ERROR_TYPE = "error.type"
# A settlement record: a zero-length span under a file's deserialize span, written when the
# file's storage figure is settled (at the end of the start-up, for files whose pages are read
# after their span ended). It carries the figure's attributes (CACHE_STORAGE_READ_*,
# CACHE_SETTLED_RESIDENT_RATIO, CACHE_EVIDENCE); readers merge them into the parent span and
# drop the record (analyze/settlements.py). The file's span itself ends when its read ends.
SPAN_SETTLEMENT = "coldstart.settlement"
# True on a file span whose storage figure is the one known at its end: a settlement record
# with the final figure follows (merged by readers, which remove this flag). Still present in
# a trace: the process ended (killed) before the figure was settled, so it is a lower bound.
CACHE_STORAGE_READ_PROVISIONAL = "coldstart.cache.storage_read_provisional"
# Root: spans our own provider could not queue for export (its queue was full). Absent when 0.
EXPORT_DROPPED_SPANS = "coldstart.export.dropped_spans"
# Progress records: what bytes_expected is made of: "index" (the checkpoint index's total_size,
# or the sizes of the files it names), "files_opened" (the files opened so far, no index
# found), or "index+files_opened" (some directories have an index, some not).
PROGRESS_BYTES_EXPECTED_SOURCE = "coldstart.progress.bytes_expected_source"
EXPECTED_FROM_INDEX = "index"
EXPECTED_FROM_FILES_OPENED = "files_opened"

# --- failures (OpenTelemetry's own names: the analyzer reads them on any span) --------------
EXCEPTION_EVENT = "exception"  # the event an exception is recorded as
EXCEPTION_TYPE = "exception.type"  # its attribute naming the type

# --- metrics ------------------------------------------------------------------------------
METRIC_STARTUP_DURATION = "model.startup.duration"
METRIC_PHASE_DURATION = "model.startup.phase.duration"
METRIC_SHARD_DURATION = "model.startup.shard.duration"
METRIC_BYTES = "model.startup.bytes"
METRIC_COPY_BYTES = "model.startup.copy.bytes"  # By, counter, by coldstart.phase (direction) and memory
METRIC_COPY_THROUGHPUT = "model.startup.copy.throughput"  # By/s, histogram, by direction
METRIC_GRAPH_CAPTURES = "model.startup.graph.captures"  # {graph}, counter (0 recorded when none)
METRIC_GRAPH_CAPTURE_TIME = "model.startup.graph.capture.time"  # s, counter (0 recorded when none)

# Metric-only attributes (labels). Bounded value sets; see docs/metrics.md.
MODEL_NAME = "coldstart.model.name"  # the model a deploy serves; set via OTEL_RESOURCE_ATTRIBUTES or options
# root: the program's entry point as started (sys.argv[0]: a script's path, a module's file
# under `python -m`; "-c" for a command string), OTel's process.command. Different programs
# sharing one service.name are told apart by it (analyze/programs.py).
PROCESS_COMMAND = "process.command"
SHARD_POSITION = "coldstart.shard.position"  # first | rest: the first file read vs the others
COPY_MEMORY = "coldstart.copy.memory"  # pinned | pageable | unknown (source memory of a copy)
MEMORY_PINNED = "pinned"
MEMORY_PAGEABLE = "pageable"

# --- transformers' from_pretrained steps (patches/transformers.py) ------------------------
# The steps of from_pretrained that transformers exposes as functions (or, for building the
# model, as its init contexts), each a span with its own phase, so the time inside
# from_pretrained outside the reads (deserialize, cast, copies nest inside these) is named
# without the user phasing code they do not own. docs/frameworks.md lists the hook of each
# step and the transformers versions checked.
PHASE_TF_FROM_PRETRAINED = "transformers.from_pretrained"  # the outermost call; its own time is what no step covers (config, Hub look-ups)
PHASE_TF_IMPORT_MODEL_CODE = "transformers.import_model_code"  # an Auto class resolving (importing) the model's class
PHASE_TF_BUILD_MODEL = "transformers.build_model"  # cls(config) inside transformers' init contexts
PHASE_TF_WEIGHT_CONVERSIONS = "transformers.weight_conversions"  # 5.x: the checkpoint key/weight conversion mapping
PHASE_TF_LOAD_WEIGHTS = "transformers.load_weights"  # _load_pretrained_model: reading, converting, setting the weights
PHASE_TF_INIT_MISSING = "transformers.init_missing_weights"  # initialising weights the checkpoint lacks
PHASE_TF_TIE_WEIGHTS = "transformers.tie_weights"
PHASE_TF_DISPATCH = "transformers.dispatch"  # accelerate's dispatch for a multi-device or offloading device_map
TRANSFORMERS_PHASES = (
    PHASE_TF_FROM_PRETRAINED,
    PHASE_TF_IMPORT_MODEL_CODE,
    PHASE_TF_BUILD_MODEL,
    PHASE_TF_WEIGHT_CONVERSIONS,
    PHASE_TF_LOAD_WEIGHTS,
    PHASE_TF_INIT_MISSING,
    PHASE_TF_TIE_WEIGHTS,
    PHASE_TF_DISPATCH,
)
RESERVED_PHASE_NAMES += TRANSFORMERS_PHASES
# Finding the checkpoint files (downloading them when the Hub cache lacks them): phase download.
SPAN_TF_RESOLVE_CHECKPOINT = "coldstart.transformers.resolve_checkpoint_files"
TF_VERSION = "coldstart.transformers.version"  # on the from_pretrained span
TF_MODEL_CLASS = "coldstart.transformers.model_class"  # e.g. BertModel (from_pretrained, import_model_code)
TF_MODEL_MODULE = "coldstart.transformers.model_module"  # e.g. transformers.models.bert.modeling_bert
# import_model_code: modules added to sys.modules while it ran (by any thread: an upper bound).
TF_MODULES_IMPORTED = "coldstart.transformers.modules_imported"
# build_model: true when transformers builds on the meta device (nothing allocated or
# initialised before the weights arrive), false when it builds on a real device (DeepSpeed
# ZeRO-3's zero.Init, for one); absent when the init contexts do not say.
TF_META_INIT = "coldstart.transformers.meta_init"

# --- lazy weights: what is still on storage at ready(), what the first requests read (issue 28) --
# On a file's final settlement record (so, once merged, on its deserialize span): bytes of the
# file not in the page cache at ready() while the process still maps it (its tensors are backed
# by the file's pages: safetensors, transformers 5, torch.load(mmap=True)), so later touches
# (the first forward passes) read them from storage. Absent for a resident file or one nothing
# maps any more (its tensors were copied), and below verdicts.LAZY_MIN_BYTES.
LAZY_UNREAD_BYTES = "coldstart.lazy.unread_bytes"
# A first-use record: a zero-length span under a file's deserialize span, written after ready()
# by the monitor thread while it follows a file that had LAZY_UNREAD_BYTES (one at the start,
# one when the figure grew, at most every second, one at the end); the latest one holds. Readers
# merge its attributes into the file's span and drop the record (analyze/settlements.py).
SPAN_FIRST_USE = "coldstart.first_use"
FIRST_USE_BYTES = "coldstart.first_use.bytes"  # bytes of the file read from storage since ready()
FIRST_USE_UNREAD_BYTES = "coldstart.first_use.unread_bytes"  # still not in the page cache at the latest sample
FIRST_USE_FIRST_S = "coldstart.first_use.first_s"  # seconds after ready() of the sample that first saw a read
FIRST_USE_LAST_S = "coldstart.first_use.last_s"  # ... of the sample that last saw one
FIRST_USE_FOLLOWED_S = "coldstart.first_use.followed_s"  # ... of the latest sample
FIRST_USE_BOUND_S = "coldstart.first_use.bound_s"  # how long a file is followed at most
FIRST_USE_END = "coldstart.first_use.end"  # why the following ended; absent while it goes on
FIRST_USE_END_RESIDENT = "resident"  # every page of the file is in the page cache
FIRST_USE_END_BOUND = "bound"  # FIRST_USE_BOUND_S passed
# otherwise the end reason of the process's ending (END_EXIT, END_EXCEPTION, END_SIGTERM,
# END_UNINSTRUMENTED): the process ended while following
METRIC_LAZY_UNREAD = "model.startup.lazy.unread"  # By, counter: LAZY_UNREAD_BYTES of the start-up's files
METRIC_FIRST_USE_BYTES = "model.startup.first_use.bytes"  # By, counter: read from storage after ready()

# --- the first request (first_token.py; vLLM: patches/vllm.py) ---------------------------
# The first request served after ready(): one span under the root, after it (the root ends at
# ready()), from the request's start to its end. Marked by otel_coldstart.first_request() or,
# under vLLM's plugin, by the front end's first finished request. A first_request() before
# ready() ends the start-up first (READY_BY says so on the root).
PHASE_FIRST_REQUEST = "first_request"
SPAN_FIRST_REQUEST = "coldstart.first_request"
# A zero-length record under the root when the first request begins, flushed at once: a process
# killed during its first request still says that it had begun, and when.
SPAN_FIRST_REQUEST_BEGUN = "coldstart.first_request.begun"
FIRST_REQUEST_TTFT_S = "coldstart.first_request.time_to_first_token_s"  # double: process start to its end
FIRST_REQUEST_AFTER_READY_S = "coldstart.first_request.after_ready_s"  # double: ready() to its start (waiting for traffic)
FIRST_REQUEST_SOURCE = "coldstart.first_request.source"  # "first_request()" or "vllm"
FIRST_REQUEST_REQUEST_TRACE_ID = "coldstart.first_request.request_trace_id"  # the host's request span's trace (hex), if any
FIRST_REQUEST_END = "coldstart.first_request.end"  # on an interrupted one: the process's end reason (exit, sigterm, ...)
READY_BY = "coldstart.ready.by"  # root: "first_request" when a first request ended the start-up (no ready() before it)
METRIC_TIME_TO_FIRST_TOKEN = "model.startup.time_to_first_token"  # s, histogram: process start to the first request's end (successful ones)
# --- end of the first request ----------------------------------------------------------------
# --- the Run:ai Model Streamer (patches/runai_streamer.py) -----------------------------------
# One span per SafetensorsStreamer.stream_files call (its own time: the streamer's set-up and
# header reads), the files' coldstart.deserialize spans under it.
PHASE_RUNAI_STREAMER = "runai_streamer"
SPAN_RUNAI_STREAM = "coldstart.runai_streamer.stream"

# --- device phases (patches/tensor_ops, pinning, cuda_graphs, runtime, compile) -------------
# Seconds from the first non-blocking copy of an aggregate being queued to the device
# finishing the last one, resolved from CUDA events when the aggregate ends.
COPY_ASYNC_S = "coldstart.copy.async_s"
# Calls of an aggregate whose asynchronous device work has no event timing (a CUDA graph
# capture was open, an event call failed): their time is the host's. Absent when 0.
COPY_UNTIMED_CALLS = "coldstart.copy.untimed_calls"
# True when the device work was still queued after the bounded wait at the end of the
# start-up (or a capture stayed open): host timing only, coldstart.copy.async_s absent.
COPY_ASYNC_UNRESOLVED = "coldstart.copy.async_unresolved"
# Seconds blocking copies spent waiting for earlier queued device work (an asynchronous GPU
# cast, say) before their own transfer: not counted in their busy time.
COPY_WAITED_S = "coldstart.copy.waited_s"
PIN_KIND = "coldstart.pin.kind"  # copy (Tensor.pin_memory) | alloc (torch.empty(..., pin_memory=True))
PIN_KIND_COPY = "copy"
PIN_KIND_ALLOC = "alloc"
GRAPH_API = "coldstart.graph.api"  # torch.cuda.graph | torch.cuda.CUDAGraph | torch.accelerator.Graph
GRAPH_BATCH_SIZES = "coldstart.graph.batch_sizes"  # distinct, in capture order, when known
GRAPH_BATCH_SIZE = "coldstart.graph.batch_size"  # a single capture's, when known
GRAPH_MAX_CAPTURE_S = "coldstart.graph.max_capture_s"  # the longest capture in an aggregate
GRAPH_FAILED = "coldstart.graph.failed"  # true on the span of a capture that raised
# Seconds torch.cuda.graph / torch.accelerator.Graph.__enter__ spent before capture_begin
# (torch.cuda.synchronize() waiting for earlier GPU work, emptying the caches): not capture time.
GRAPH_PRE_CAPTURE_S = "coldstart.graph.pre_capture_s"
SPAN_MAKE_GRAPHED_CALLABLES = "coldstart.make_graphed_callables"
RUNTIME_BACKEND = "coldstart.runtime.backend"  # cuda
RUNTIME_DEVICE_COUNT = "coldstart.runtime.device_count"
# Which start a runtime_init span is: "driver" (cuInit, through the first
# torch.cuda.is_available()/device_count() that asks the CUDA runtime) or "lazy_init"
# (torch.cuda._lazy_init: runtime, device discovery, torch's CUDA state).
RUNTIME_STEP = "coldstart.runtime.step"
RUNTIME_STEP_DRIVER = "driver"
RUNTIME_STEP_LAZY_INIT = "lazy_init"
COMPILE_ID = "coldstart.compile.id"  # dynamo's compile id, e.g. "0/0"
COMPILE_TRIGGER = "coldstart.compile.trigger"  # dynamo | lazy_backward | cudagraph_recording | ...

# --- device phases: runtime backends and the host link (issue 23) ---------------------------
RUNTIME_BACKEND_CUDA = "cuda"
RUNTIME_BACKEND_ROCM = "rocm"  # torch.version.hip: torch.cuda runs on HIP
# On the lazy_init runtime_init span: the host<->device link the bandwidth figures of h2d and
# d2h copies are bounded by, and that bound (bytes/s per direction, the visible devices'
# links summed). "pcie gen5 x16" from sysfs; "unknown" (an architecture whose GPUs may be
# attached otherwise, sysfs unreadable) with the documented upper bound; "integrated" (a GPU
# sharing host memory) with no bound. docs/device-phases.md, "Bandwidth".
RUNTIME_LINK = "coldstart.runtime.link"
RUNTIME_LINK_BPS = "coldstart.runtime.link_bps"
RUNTIME_LINK_UNKNOWN = "unknown"
RUNTIME_LINK_INTEGRATED = "integrated"
# The documented bound of an unknown link, per device and direction: NVLink-C2C's (GH200,
# GB200: 900 GB/s both ways), the fastest host link a GPU has. Also the analyzer's bound for
# a trace that recorded no link (CUDA was up before instrument()).
LINK_BOUND_UNKNOWN_BPS = 450e9

# --- shared with issue 26 (explain): compile provenance and per-size capture times ----------
# The runtime (patches/compile.py, patches/cuda_graphs.py) writes them; the analyzer's what-if
# levers read them (compile-cache: a compilation at the cost of its fastest cache hit of the
# same frame; fewer-captures: the time of the captures of the sizes not kept).
COMPILE_CACHE_HITS = "coldstart.compile.cache.hits"  # int: cache lookups of the compilation that hit
COMPILE_CACHE_MISSES = "coldstart.compile.cache.misses"  # int: ... that missed (compiled from scratch)
COMPILE_FRAME = "coldstart.compile.frame"  # str: the compiled code's identity ("the same graph")
GRAPH_CAPTURE_TIMES_S = "coldstart.graph.capture_times_s"  # double[]: per capture, as batch_sizes
# --- end of the block shared with issue 26 --------------------------------------------------

# --- why the big phases took long (issue 26): imports, compile provenance, capture times ---
# One coldstart.import span per top-level import that ran longer than the threshold while the
# start-up was open (patches/imports.py); the span's duration is the import's cumulative time.
IMPORT_MODULE = "coldstart.import.module"  # the module the import statement asked for
IMPORT_CUMULATIVE_S = "coldstart.import.cumulative_s"  # the import with everything it imported
IMPORT_SELF_S = "coldstart.import.self_s"  # that module's own body, without what it imported
IMPORT_MODULES = "coldstart.import.modules"  # modules loaded by it (itself included)
IMPORT_HEAVIEST = "coldstart.import.heaviest"  # module names, largest self time first (bounded)
IMPORT_HEAVIEST_S = "coldstart.import.heaviest_s"  # their self times, in the same order
IMPORT_PACKAGES = "coldstart.import.packages"  # top-level packages it loaded, largest first (bounded)
IMPORT_PACKAGES_S = "coldstart.import.packages_s"  # each package's summed self time, same order
IMPORT_FAILED = "coldstart.import.failed"  # true when the import raised (the host may catch it)
IMPORT_IMPORTER = "coldstart.import.importer"  # "module:line" whose code ran the import (torch._compile:47)
# Why an import was slow (issue 38): measured around the top-level import, never per module.
IMPORT_COMPILED_MODULES = "coldstart.import.compiled_modules"  # modules compiled from source (no valid cached bytecode)
IMPORT_COMPILE_S = "coldstart.import.compile_s"  # the time compiling them (source_to_code)
IMPORT_STORAGE_READ_BYTES = "coldstart.import.storage_read_bytes"  # bytes the process read from storage meanwhile
IMPORT_CPU_S = "coldstart.import.cpu_s"  # the importing thread's CPU time during the import
IMPORT_RUNQUEUE_S = "coldstart.import.runqueue_s"  # its time ready to run but waiting for a core
# On coldstart.compile spans (patches/compile.py), from torch's own counters and compile metrics.
# Besides COMPILE_CACHE_HITS / _MISSES and COMPILE_FRAME (the block shared with issue 27 above), per
# cache: coldstart.compile.cache.<cache>.hits / .misses / .bypasses, <cache> one of COMPILE_CACHES.
COMPILE_CACHES = ("fx_graph", "aot_autograd", "dynamo")  # Inductor FX graph, AOTAutograd, precompile


def compile_cache_attribute(cache: str, outcome: str) -> str:
    """``coldstart.compile.cache.<cache>.<outcome>``, outcome hits | misses | bypasses | saved |
    entries_at_start | bypass_reason."""
    return f"coldstart.compile.cache.{cache}.{outcome}"


COMPILE_CACHE_DIR = "coldstart.compile.cache.dir"  # the Inductor cache directory in use
# Whether the cache could have hit (issue 39): per cache, the entries its directory held before the
# start-up's first compilation (coldstart.compile.cache.<cache>.entries_at_start, fx_graph and
# aot_autograd; counted up to COMPILE_CACHE_ENTRIES_COUNTED), and the entries torch wrote during the
# compilation (coldstart.compile.cache.aot_autograd.saved, torch's autograd_cache_saved counter).
COMPILE_CACHE_ENTRIES_COUNTED = 1000
# str: why torch bypassed a cache, in its own words (coldstart.compile.cache.<cache>.bypass_reason,
# fx_graph and aot_autograd; the distinct reasons of the compilation joined by "; ", bounded):
# "Cannot cache a graph with freezing enabled", "Unsupported post grad custom pass", ...
# bool: autograd was on when the compilation began (not under no_grad()/inference_mode()): torch
# then compiles a training graph, whose AOTAutograd entry it writes only once the backward is compiled.
COMPILE_GRAD_ENABLED = "coldstart.compile.grad_enabled"
COMPILE_RECOMPILE = "coldstart.compile.recompile"  # true: a recompilation of a frame compiled before
COMPILE_RECOMPILE_REASON = "coldstart.compile.recompile_reason"  # the guard that failed
COMPILE_FAILURE = "coldstart.compile.failure"  # the exception type when the compilation failed
COMPILE_GRAPH_BREAKS = "coldstart.compile.graph_breaks"
# torch's own cumulative stage times (nested: dynamo > aot_autograd > inductor > codegen).
COMPILE_STAGES = ("dynamo", "aot_autograd", "inductor", "codegen", "kernel_compile", "autotune")


def compile_stage_attribute(stage: str) -> str:
    """``coldstart.compile.stage.<stage>_s``."""
    return f"coldstart.compile.stage.{stage}_s"


# What torch could not tell for this compilation ("counters", "compilation_metrics"): unknown,
# not zero.
COMPILE_EVIDENCE_UNAVAILABLE = "coldstart.compile.evidence.unavailable"

# --- start-ups in flight (inflight.py; analyze/interrupted.py reads them back) -------------
# A progress record: a zero-length span under the (still open) root, written every
# progress_interval_s while the start-up runs, so that a start-up killed with SIGKILL (the
# kubelet, the OOM killer) leaves what it had done and what was running.
SPAN_PROGRESS = "coldstart.progress"
PROGRESS_SEQ = "coldstart.progress.seq"  # 1, 2, ... per start-up
PROGRESS_ROOT = "coldstart.progress.root"  # JSON: the root's start_ns, parent_id, attributes
PROGRESS_OPEN = "coldstart.progress.open"  # JSON: the open spans (id, parent, name, phase, start, file)
PROGRESS_AGGREGATES = "coldstart.progress.aggregates"  # JSON: aggregates not yet written (casts, copies)
PROGRESS_PHASE = "coldstart.progress.phase"  # the phase running when the record was written
PROGRESS_BYTES_LOADED = "coldstart.progress.bytes_loaded"  # checkpoint bytes read so far
PROGRESS_BYTES_EXPECTED = "coldstart.progress.bytes_expected"  # index total_size, else files seen
PROGRESS_IDLE_S = "coldstart.progress.idle_s"  # seconds since the last sign of progress
# INTERRUPTED and END_PHASE (with the attributes above) are also what the analyzer sets on
# a killed start-up it rebuilt: spans open at the last progress record end there.
END_KILLED = "killed"  # end_reason the analyzer gives a root it rebuilt from progress records
END_UNTIMED = "untimed"  # end_reason the analyzer gives a root whose own times cannot be true
# The stall watchdog: one event per stall, on the open span (and the next progress record).
EVENT_STALL = "coldstart.stall"
STALL_IDLE_S = "coldstart.stall.idle_s"  # seconds without progress when the stall was recorded
STALL_PHASE = "coldstart.stall.phase"
STALL_SPAN_ID = "coldstart.stall.span_id"  # the open span the start-up waited in (hex)
STALL_THREAD_ID = "coldstart.stall.thread.id"  # the thread that owns it (listed first)
STALL_STACKS = "coldstart.stall.stacks"  # Python stacks of all threads, innermost frame first, bounded

# --- time to ready, live (time_to_ready.py, _history.py) ----------------------------------
# On each progress record once the history is read: the estimate of the seconds left to
# ready(), from earlier start-ups of the same service; without any, no estimate and why.
PROGRESS_REMAINING_S = "coldstart.progress.remaining_s"  # double: seconds to ready(), estimated
PROGRESS_REMAINING_HISTORY = "coldstart.progress.remaining_history"  # int: earlier start-ups used (0: none)
PROGRESS_OVERRUN_S = "coldstart.progress.overrun_s"  # double: seconds past the earlier start-ups (absent: not past)
PROGRESS_REMAINING_BASIS = "coldstart.progress.remaining_basis"  # str: where it was matched, or why none
METRIC_INFLIGHT_REMAINING = "model.startup.inflight.remaining"  # s, gauge: the estimate (absent without one)
METRIC_INFLIGHT_OVERRUN = "model.startup.inflight.overrun"  # s, gauge: past the earlier start-ups (0: not past)
# --- end of time to ready ------------------------------------------------------------------

METRIC_INFLIGHT_ELAPSED = "model.startup.inflight.elapsed"  # s, gauge, by the running coldstart.phase
METRIC_INFLIGHT_PHASE_ELAPSED = "model.startup.inflight.phase.elapsed"  # s, gauge: time in that phase
METRIC_INFLIGHT_LOADED = "model.startup.inflight.loaded"  # By, gauge: checkpoint bytes read so far
METRIC_INFLIGHT_EXPECTED = "model.startup.inflight.expected"  # By, gauge: bytes expected in all

# --- attributes whose OTLP value is an array (docs/conventions.md: string[], int[], double[]) --
# Jaeger and Zipkin have no list type: the Collector's translators write such a value as its
# JSON text (`["torch","numpy"]`, `[1,2,4]`, `[0.5,1]`). The analyzer's Jaeger and Zipkin
# readers parse that text back for these names only, to the element type given here (JSON
# writes the double 1.0 as `1`), so the same start-up reads the same from OTLP, Jaeger and
# Zipkin; any other string, list-like or not, is kept as written (analyze/list_values.py).
LIST_ATTRIBUTES = {
    EVIDENCE_UNAVAILABLE: "string",
    LAUNCH_PROCESSES_NOT_STARTED: "string",
    GRAPH_BATCH_SIZES: "int",
    GRAPH_CAPTURE_TIMES_S: "double",
    COMPILE_EVIDENCE_UNAVAILABLE: "string",
    IMPORT_HEAVIEST: "string",
    IMPORT_HEAVIEST_S: "double",
    IMPORT_PACKAGES: "string",
    IMPORT_PACKAGES_S: "double",
    "process.command_args": "string",  # OTel semconv; on the coldstart.launch span of `otel-coldstart run`
}
# --- model delivery: downloads (issue 37; patches/huggingface_hub.py, s3.py, fsspec.py) ---
# One span per file fetched for the start-up (or found in the local cache), phase download;
# the requests made for metadata (HEAD of a file, repo info, revision resolution, a Xet
# token) are spans of their own, so a fully cached start still shows its round trips.
SPAN_DOWNLOAD_FILE = "coldstart.download.file"  # one file: hf_hub_download, an S3 object
SPAN_DOWNLOAD_SNAPSHOT = "coldstart.download.snapshot"  # snapshot_download: parent of its files
SPAN_DOWNLOAD_METADATA = "coldstart.download.metadata"  # one metadata request to the hub
DOWNLOAD_SOURCE = "coldstart.download.source"  # huggingface_hub | s3 | fsspec | runai_streamer
DOWNLOAD_SOURCE_HF = "huggingface_hub"
DOWNLOAD_SOURCE_S3 = "s3"
DOWNLOAD_SOURCE_FSSPEC = "fsspec"  # a remote file opened through an fsspec file system
DOWNLOAD_SOURCE_RUNAI = "runai_streamer"  # an object-store file the Run:ai Model Streamer streamed
DOWNLOAD_REPO = "coldstart.download.repo"  # the hub repo id (org/name), or the S3 bucket
DOWNLOAD_REPO_TYPE = "coldstart.download.repo_type"  # model | dataset | space (hub)
DOWNLOAD_FILENAME = "coldstart.download.filename"  # the file in the repo, or the S3 key
DOWNLOAD_REVISION = "coldstart.download.revision"  # the revision asked for (main, a tag, a commit)
DOWNLOAD_COMMIT = "coldstart.download.commit"  # the commit it resolved to, when known
DOWNLOAD_HOST = "coldstart.download.host"  # the endpoint's host[:port]: never a token, path or query
# Where the file is on the node afterwards (the hub cache's snapshot path, the S3 target
# file): the analyzer matches it with the coldstart.deserialize span that reads it.
DOWNLOAD_PATH = "coldstart.download.path"
DOWNLOAD_BYTES = "coldstart.download.bytes"  # bytes received from the network for this file
DOWNLOAD_CACHED_BYTES = "coldstart.download.cached_bytes"  # bytes served from the local cache
DOWNLOAD_EXPECTED_BYTES = "coldstart.download.expected_bytes"  # the size the metadata announced
DOWNLOAD_CACHE_HIT = "coldstart.download.cache_hit"  # true: nothing of the file came over the network
DOWNLOAD_RESUMED = "coldstart.download.resumed"  # true: a transfer went on from a byte offset (Range)
DOWNLOAD_RETRIES = "coldstart.download.retries"  # transfers started again after a failure
DOWNLOAD_RETRY_REASONS = "coldstart.download.retry_reasons"  # string[]: the error type of each
DOWNLOAD_TRANSFER_S = "coldstart.download.transfer_s"  # seconds moving bytes (retries' waits included)
DOWNLOAD_TRANSPORT = "coldstart.download.transport"  # http | xet | s3 | the fsspec protocol (hf, s3, gcs, https…)
DOWNLOAD_NOT_FOUND = "coldstart.download.not_found"  # true: the hub has no such file (an optional one probed)
DOWNLOAD_FILES = "coldstart.download.files"  # on a snapshot span: files it returned
# On a metadata span.
DOWNLOAD_METHOD = "coldstart.download.method"  # HEAD | GET
DOWNLOAD_URL_PATH = "coldstart.download.url_path"  # the request's path, without query
DOWNLOAD_STATUS = "coldstart.download.status"  # the HTTP status (absent when no response came)
# On progress records (inflight.py): network bytes the start-up's downloads received so far
# (ended and in flight), and the sizes those files announced (their HEAD / ContentLength).
PROGRESS_DOWNLOAD_BYTES = "coldstart.progress.download_bytes"
PROGRESS_DOWNLOAD_EXPECTED = "coldstart.progress.download_expected"
# Metrics (recorded when the start-up ends, from the spans above).
METRIC_DOWNLOAD_BYTES = "model.startup.download.bytes"  # By, counter: bytes from the network
METRIC_DOWNLOAD_DURATION = "model.startup.download.duration"  # s, histogram: per file, by cache hit
METRIC_DOWNLOAD_METADATA_REQUESTS = "model.startup.download.metadata.requests"  # {request}, counter
LIST_ATTRIBUTES[DOWNLOAD_RETRY_REASONS] = "string"  # a list in OTLP, JSON text in Jaeger/Zipkin
# --- end of model delivery: downloads ------------------------------------------------------
