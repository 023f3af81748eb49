"""The host<->device link bound (patches/_host_link.py), read from a sysfs tree built here as
Linux lays it out: drivers/<driver>/<BDF> links to devices/pciDDDD:BB/<port>/<BDF>, and each
PCI function has max_link_speed / max_link_width."""

from __future__ import annotations

import os

import pytest

from otel_coldstart.patches import _host_link


def _function(root, path: str, speed: str | None, width: str | None, **files) -> str:
    directory = root / path
    directory.mkdir(parents=True, exist_ok=True)
    if speed is not None:
        (directory / "max_link_speed").write_text(speed + "\n")
    if width is not None:
        (directory / "max_link_width").write_text(width + "\n")
    for name, text in files.items():
        (directory / name).write_text(text + "\n")
    return str(directory)


def _bind(root, driver: str, device_dir: str) -> None:
    drivers = root / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    os.symlink(device_dir, drivers / os.path.basename(device_dir))


@pytest.mark.parametrize("gts, width, gbps", [
    (2.5, 1, 0.25), (8.0, 16, 15.75), (16.0, 16, 31.51), (32.0, 16, 63.02), (32.0, 8, 31.51), (64.0, 16, 121.0),
])
def test_pcie_bound_is_the_raw_data_rate_after_line_coding(gts, width, gbps):
    assert _host_link.pcie_bound_bps(gts, width) / 1e9 == pytest.approx(gbps, abs=0.01)


@pytest.mark.parametrize("text, value", [("32.0 GT/s PCIe", 32.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe", 2.5),
                                         ("Unknown", None), ("", None)])
def test_sysfs_speed_strings(text, value):
    assert _host_link.parse_speed(text) == value


def test_a_gen5_gpu_in_a_gen4_slot_is_bounded_by_the_slot(tmp_path):
    port = "devices/pci0000:40/0000:40:01.1"
    _function(tmp_path, port, "16.0 GT/s PCIe", "16")
    gpu = _function(tmp_path, port + "/0000:41:00.0", "32.0 GT/s PCIe", "16")
    _bind(tmp_path, "nvidia", gpu)
    assert _host_link.pcie_link(str(tmp_path)) == (16.0, 16)
    link = _host_link.describe(1, machine="x86_64", sys_root=str(tmp_path))
    assert link.description == "pcie gen4 x16" and link.bound_bps == pytest.approx(31.5e9, rel=1e-3)


def test_several_devices_sum_the_fastest_link(tmp_path):
    for bus in ("41", "81"):
        port = f"devices/pci0000:{bus}/0000:{bus}:01.0"
        _function(tmp_path, port, "32.0 GT/s PCIe", "16")
        _bind(tmp_path, "nvidia", _function(tmp_path, f"{port}/0000:{bus}:00.0", "32.0 GT/s PCIe", "16"))
    link = _host_link.describe(2, machine="x86_64", sys_root=str(tmp_path))
    assert link.description == "pcie gen5 x16 (x2 devices)"
    assert link.bound_bps == pytest.approx(2 * 63.015e9, rel=1e-3)


def test_without_a_driver_directory_gpus_are_found_by_vendor_and_class(tmp_path):
    """AMD's amdgpu bound in another namespace, say: the display controllers of a GPU vendor."""
    port = "devices/pci0000:00/0000:00:03.1"
    _function(tmp_path, port, "16.0 GT/s PCIe", "16")
    gpu = _function(tmp_path, port + "/0000:03:00.0", "16.0 GT/s PCIe", "16", vendor="0x1002", **{"class": "0x038000"})
    nic = _function(tmp_path, port + "/0000:04:00.0", "32.0 GT/s PCIe", "16", vendor="0x15b3", **{"class": "0x020000"})
    devices = tmp_path / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    for path in (gpu, nic):
        os.symlink(path, devices / os.path.basename(path))
    assert _host_link.pcie_link(str(tmp_path)) == (16.0, 16)  # the NIC's faster link is not a GPU's


def test_an_idle_link_trained_down_does_not_lower_the_bound(tmp_path):
    """current_link_speed says 2.5 GT/s on an idle GPU: the bound uses the maxima."""
    port = "devices/pci0000:40/0000:40:01.1"
    _function(tmp_path, port, "32.0 GT/s PCIe", "16", current_link_speed="2.5 GT/s PCIe")
    _bind(tmp_path, "nvidia", _function(tmp_path, port + "/0000:41:00.0", "32.0 GT/s PCIe", "16",
                                        current_link_speed="2.5 GT/s PCIe"))
    assert _host_link.pcie_link(str(tmp_path)) == (32.0, 16)


@pytest.mark.parametrize("machine", ["aarch64", "ppc64le"])
def test_hosts_whose_gpus_may_use_nvlink_to_the_cpu_are_unknown_links(tmp_path, machine):
    """GH200/GB200 move host data over NVLink-C2C (450 GB/s a direction), POWER9 over NVLink:
    sysfs' PCIe link would be a false, low bound there."""
    port = "devices/pci0000:40/0000:40:01.1"
    _function(tmp_path, port, "32.0 GT/s PCIe", "16")
    _bind(tmp_path, "nvidia", _function(tmp_path, port + "/0000:41:00.0", "32.0 GT/s PCIe", "16"))
    link = _host_link.describe(1, machine=machine, sys_root=str(tmp_path))
    assert link == ("unknown", _host_link.UNKNOWN_LINK_BPS)


def test_unreadable_sysfs_is_an_unknown_link_and_integrated_has_no_bound(tmp_path):
    assert _host_link.describe(4, machine="x86_64", sys_root=str(tmp_path / "absent")) == (
        "unknown", 4 * _host_link.UNKNOWN_LINK_BPS)
    assert _host_link.describe(1, integrated=True) == ("integrated", None)
