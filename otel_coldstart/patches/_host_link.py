"""The host<->device link: the bound no host-to-device or device-to-host bandwidth can pass.

A bandwidth figure above it is a timing error (launch time taken for transfer time), never
a fast copy, so the analyzer warns where one is. Read once, when CUDA comes up
(patches/runtime.py), and written on the ``runtime_init`` span:

- **PCIe, from sysfs** (x86-64 Linux): each GPU's link as negotiated at its best, the lower
  of the GPU's and its upstream port's ``max_link_speed`` and ``max_link_width``
  (``current_link_speed`` is no bound: an idle GPU trains its link down to 2.5 GT/s). The
  bound is the raw data rate after line coding, above what a real copy reaches (TLP headers
  cost another 10-15%): Gen3 x16 15.8 GB/s, Gen4 31.5, Gen5 63.0, Gen6 121 per direction.
  Several visible devices: their links summed (an aggregate may copy to several at once),
  each taken as the fastest GPU link found.
- **Unknown** (another architecture, sysfs unreadable, no GPU found there): the documented
  upper bound :data:`UNKNOWN_LINK_BPS`, 450 GB/s per device and direction, NVLink-C2C's
  (GH200, GB200: 900 GB/s both ways), the fastest host link a GPU has. aarch64 and ppc64le
  hosts count as unknown even where sysfs shows a PCIe link: their GPUs may move host data
  over NVLink-C2C or NVLink, which sysfs does not describe.
- **Integrated** (the GPU shares host memory, ``is_integrated``): a "copy" never crosses a
  link; no bound.
"""

from __future__ import annotations

import os
import platform
from collections import namedtuple

from .. import semconv

UNKNOWN_LINK_BPS = semconv.LINK_BOUND_UNKNOWN_BPS
UNKNOWN = semconv.RUNTIME_LINK_UNKNOWN
INTEGRATED = semconv.RUNTIME_LINK_INTEGRATED

# GT/s per lane -> PCIe generation, and the share of raw bits that is data after line coding.
_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_GPU_DRIVERS = ("nvidia", "amdgpu")
_GPU_VENDORS = ("0x10de", "0x1002")  # NVIDIA, AMD
_PCIE_ARCHITECTURES = ("x86_64", "amd64", "i686")


class Link(namedtuple("Link", (
    "description",  # "pcie gen5 x16", "unknown", "integrated"
    "bound_bps",  # bytes/s per direction, all visible devices; None: no link to bound
))):
    __slots__ = ()


def coding_efficiency(gts: float) -> float:
    if gts <= 5.0:
        return 8 / 10  # Gen1-2: 8b/10b
    if gts <= 32.0:
        return 128 / 130  # Gen3-5: 128b/130b
    return 242 / 256  # Gen6: FLIT mode (FEC and CRC in every 256-byte flit)


def pcie_bound_bps(gts: float, width: int) -> float:
    """Bytes/s one direction of a PCIe link carries at most."""
    return gts * 1e9 * width * coding_efficiency(gts) / 8


def parse_speed(text: str) -> float | None:
    """sysfs ``max_link_speed``: "32.0 GT/s PCIe", "8 GT/s", "Unknown"."""
    head = text.strip().split(" ", 1)[0]
    try:
        value = float(head)
    except ValueError:
        return None
    return value if value > 0 else None


def parse_width(text: str) -> int | None:
    try:
        value = int(text.strip().lstrip("x"))
    except ValueError:
        return None
    return value if value > 0 else None


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _gpu_functions(sys_root: str) -> list[str]:
    """sysfs directories of the GPUs' PCI functions: those bound to a GPU driver, else the
    display controllers of a GPU vendor."""
    found = []
    for driver in _GPU_DRIVERS:
        directory = os.path.join(sys_root, "bus", "pci", "drivers", driver)
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        found += [os.path.join(directory, name) for name in names if name.count(":") == 2]
    if found:
        return found
    devices = os.path.join(sys_root, "bus", "pci", "devices")
    try:
        names = os.listdir(devices)
    except OSError:
        return []
    for name in names:
        path = os.path.join(devices, name)
        if (_read(os.path.join(path, "class")) or "").startswith("0x03") and \
                (_read(os.path.join(path, "vendor")) or "").strip() in _GPU_VENDORS:
            found.append(path)
    return found


def _function_link(path: str) -> tuple[float, int] | None:
    """(GT/s, lanes) a GPU function's link negotiates at best: the lower of its own and its
    upstream port's maxima (a Gen5 GPU in a Gen4 slot runs Gen4)."""
    real = os.path.realpath(path)
    speeds, widths = [], []
    for where in (real, os.path.dirname(real)):
        speed = parse_speed(_read(os.path.join(where, "max_link_speed")) or "")
        width = parse_width(_read(os.path.join(where, "max_link_width")) or "")
        if speed is not None and width is not None:
            speeds.append(speed)
            widths.append(width)
    if not speeds:
        return None
    return min(speeds), min(widths)


def pcie_link(sys_root: str = "/sys") -> tuple[float, int] | None:
    """The fastest GPU link in sysfs (GT/s, lanes), or None."""
    best = None
    for path in _gpu_functions(sys_root):
        link = _function_link(path)
        if link is not None and (best is None or pcie_bound_bps(*link) > pcie_bound_bps(*best)):
            best = link
    return best


def describe(devices: int, integrated: bool = False, machine: str | None = None,
             sys_root: str = "/sys") -> Link:
    """The link of ``devices`` visible GPUs, as the runtime_init span records it."""
    if integrated:
        return Link(INTEGRATED, None)
    devices = max(1, devices)
    machine = (machine if machine is not None else platform.machine()).lower()
    link = pcie_link(sys_root) if machine in _PCIE_ARCHITECTURES else None
    if link is None:
        return Link(UNKNOWN, UNKNOWN_LINK_BPS * devices)
    gts, width = link
    generation = _GENERATIONS.get(gts)
    name = f"pcie gen{generation} x{width}" if generation else f"pcie {gts:g} GT/s x{width}"
    if devices > 1:
        name += f" (x{devices} devices)"
    return Link(name, pcie_bound_bps(gts, width) * devices)


def link_attributes(torch_module) -> dict:
    """Span attributes for the link of the visible devices (after CUDA came up)."""
    count = torch_module.cuda.device_count()
    try:
        integrated = bool(count) and bool(getattr(torch_module.cuda.get_device_properties(0), "is_integrated", False))
    except Exception:  # properties unreadable: a discrete device is the honest assumption (a bound)
        integrated = False
    link = describe(count, integrated)
    attrs = {semconv.RUNTIME_LINK: link.description}
    if link.bound_bps is not None:
        attrs[semconv.RUNTIME_LINK_BPS] = link.bound_bps
    return attrs
