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

# --- attributes ---------------------------------------------------------------------------
PHASE = "coldstart.phase"
READY = "coldstart.ready"
END_REASON = "coldstart.end_reason"  # ready | exit | uninstrumented
AFTER_READY = "coldstart.after_ready"
AGGREGATE = "coldstart.aggregate"  # true on leaf spans that summarise many calls

FILE_PATH = "coldstart.file.path"
FILE_SIZE = "coldstart.file.size"
FILE_FORMAT = "coldstart.file.format"  # safetensors | torch_zip | torch_legacy
FILE_API = "coldstart.file.api"  # the call that read it, e.g. safetensors.safe_open
SHARD_INDEX = "coldstart.shard.index"
SHARD_COUNT = "coldstart.shard.count"

CACHE_RESIDENT_RATIO = "coldstart.cache.resident_ratio"
CACHE_STATE = "coldstart.cache.state"  # cold | warm | partial
CACHE_EVIDENCE = "coldstart.cache.evidence"  # read_bytes | mincore
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

# Standard OTel attributes we set (general semantic conventions).
THREAD_ID = "thread.id"
THREAD_NAME = "thread.name"

CACHE_COLD = "cold"
CACHE_WARM = "warm"
CACHE_PARTIAL = "partial"

FORMAT_SAFETENSORS = "safetensors"
FORMAT_TORCH_ZIP = "torch_zip"
FORMAT_TORCH_LEGACY = "torch_legacy"

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
SHARD_POSITION = "coldstart.shard.position"  # first | rest: the first file read vs the others
COPY_MEMORY = "coldstart.copy.memory"  # pinned | pageable | unknown (source memory of a copy)
MEMORY_PINNED = "pinned"
MEMORY_PAGEABLE = "pageable"

# --- device phases (patches/tensor_ops, pinning, cuda_graphs, runtime, compile) -------------
# Seconds from the first non-blocking copy of an aggregate being queued to the device
# finishing the last one, resolved from CUDA events when the aggregate ends.
COPY_ASYNC_S = "coldstart.copy.async_s"
PIN_KIND = "coldstart.pin.kind"  # copy (Tensor.pin_memory) | alloc (torch.empty(..., pin_memory=True))
PIN_KIND_COPY = "copy"
PIN_KIND_ALLOC = "alloc"
GRAPH_API = "coldstart.graph.api"  # torch.cuda.graph | torch.cuda.CUDAGraph | torch.accelerator.Graph
GRAPH_BATCH_SIZES = "coldstart.graph.batch_sizes"  # distinct, in capture order, when known
GRAPH_BATCH_SIZE = "coldstart.graph.batch_size"  # a single capture's, when known
GRAPH_MAX_CAPTURE_S = "coldstart.graph.max_capture_s"  # the longest capture in an aggregate
GRAPH_FAILED = "coldstart.graph.failed"  # true on the span of a capture that raised
SPAN_MAKE_GRAPHED_CALLABLES = "coldstart.make_graphed_callables"
RUNTIME_BACKEND = "coldstart.runtime.backend"  # cuda
RUNTIME_DEVICE_COUNT = "coldstart.runtime.device_count"
COMPILE_ID = "coldstart.compile.id"  # dynamo's compile id, e.g. "0/0"
COMPILE_TRIGGER = "coldstart.compile.trigger"  # dynamo | lazy_backward | cudagraph_recording | ...
