"""What a CUDA copy really moves over the bus, decided as PyTorch's ``Copy.cu`` decides it.

Pure functions over plain values (no torch import), so the accounting is testable on any
machine. Read against ``aten/src/ATen/native/cuda/Copy.cu`` (torch 2.13):

- ``copy_requires_temporaries``: a host<->device copy goes straight through one
  ``cudaMemcpy`` only when both sides have the same dtype and TensorIterator sees one
  contiguous block (same layout, dense). Anything else (a dtype change, a non-contiguous or
  broadcast source, a non-contiguous destination) goes through temporaries.
- With temporaries, the conversion device is the GPU for ``non_blocking=True`` and the CPU
  for a blocking copy ("to avoid allocating extra GPU memory"). A blocking H2D with a dtype
  change therefore converts on the host into a new *pageable* tensor
  (``src.to(dst_dtype).expand_as(dst).contiguous()``) and moves the destination dtype's
  bytes; a non-blocking one moves the source dtype's bytes
  (``src.expand_as(dst).contiguous()``: the source itself when it is already contiguous, so
  its pinned memory is used; a new pageable tensor otherwise) and casts on the device after.
- D2H mirrors it: the host side is the destination; a blocking copy with a dtype change
  moves the source dtype into a pageable temporary and converts on the host; a non-blocking
  one converts on the GPU first and moves the destination dtype.
- The stream: an H2D copy runs on the current stream of the destination device, a D2H copy
  and a device-to-device copy (also across GPUs) on the current stream of the source device.
"""

from __future__ import annotations

from collections import namedtuple

H2D = "h2d"
D2H = "d2h"

CONVERTED_NOWHERE = None
CONVERTED_ON_HOST = "host"
CONVERTED_ON_DEVICE = "device"


class BusCopy(namedtuple("BusCopy", (
    "bytes",  # bytes that cross the host<->device bus
    "pinned",  # whether the host memory the DMA reads (H2D) or writes (D2H) is page-locked
    "converted_on",  # where a dtype change / relayout happens: host | device | None
))):
    __slots__ = ()


def bus_copy(direction: str, numel: int, src_itemsize: int, dst_itemsize: int, same_dtype: bool,
             one_block: bool, host_contiguous: bool, host_pinned: bool, non_blocking: bool) -> BusCopy:
    """Bytes and memory of one host<->device copy of ``numel`` destination elements.

    ``one_block``: TensorIterator sees one contiguous block (both sides dense, same layout,
    no broadcast): with the same dtype, one direct memcpy. ``host_contiguous``: the host-side
    tensor is contiguous with the destination's shape (``.contiguous()`` returns it as is).
    ``host_pinned``: the host-side tensor the caller passed is pinned.
    """
    if direction not in (H2D, D2H):
        raise ValueError(f"not a host<->device direction: {direction!r}")
    if same_dtype and one_block:
        return BusCopy(numel * src_itemsize, host_pinned, CONVERTED_NOWHERE)
    if direction == H2D:
        if non_blocking:
            # src.expand_as(dst).contiguous(): the source itself if contiguous, else a fresh
            # pageable tensor; the cast (if any) runs on the device afterwards.
            pinned = host_pinned and host_contiguous
            return BusCopy(numel * src_itemsize, pinned, CONVERTED_ON_DEVICE if not same_dtype else None)
        # src.to(dst_dtype).expand_as(dst).contiguous(): a new pageable host tensor unless it
        # is the same dtype and already contiguous (only the destination's layout differs).
        keeps_source = same_dtype and host_contiguous
        return BusCopy(numel * dst_itemsize, host_pinned and keeps_source,
                       None if same_dtype else CONVERTED_ON_HOST)
    if non_blocking:  # D2H
        # src.to(dst_dtype) on the GPU; the host destination is used as is if contiguous.
        pinned = host_pinned and host_contiguous
        return BusCopy(numel * dst_itemsize, pinned, CONVERTED_ON_DEVICE if not same_dtype else None)
    # A host temporary in the source dtype unless the destination is contiguous and the
    # dtype is the same; the conversion happens on the host after the transfer.
    keeps_destination = same_dtype and host_contiguous
    return BusCopy(numel * src_itemsize, host_pinned and keeps_destination,
                   None if same_dtype else CONVERTED_ON_HOST)
