"""The core API in one module: devices and streams (_device.py), device
memory (_buffer.py) and transfers (_transfer.py)."""

from ._buffer import Buffer, DeviceArray
from ._device import (Device, DeviceInfo, Stream, default_kind, device,
                      devices, version)
from ._transfer import (PathOrFd, Transfer, _target, read_batch, read_into,
                        run_ios, write_batch, write_from)

__all__ = [
    "Buffer", "Device", "DeviceArray", "DeviceInfo", "PathOrFd", "Stream",
    "Transfer", "_target", "default_kind",
    "device", "devices", "read_batch", "read_into", "run_ios",
    "version", "write_batch", "write_from",
]
