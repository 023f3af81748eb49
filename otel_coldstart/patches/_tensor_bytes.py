"""Bytes a tensor's data occupies, for every layout the host may hand us.

``Tensor.nbytes`` raises for sparse COO tensors (torch asks the caller to choose between
the constituents and the dense equivalent). A sparse checkpoint loaded with ``torch.load``
and cast with ``.to`` is ordinary host work, not an internal error of ours: its bytes are
its constituents', the indices and the values, which is what a cast or copy moves.
"""

from __future__ import annotations


def tensor_nbytes(obj) -> int:
    """Bytes of a tensor (any layout) or a storage (whose ``nbytes`` is a method)."""
    layout = getattr(obj, "layout", None)
    if layout is not None and str(layout) == "torch.sparse_coo":
        return int(obj._indices().nbytes) + int(obj._values().nbytes)
    nbytes = obj.nbytes
    return int(nbytes() if callable(nbytes) else nbytes)
