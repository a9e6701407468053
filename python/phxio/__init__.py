"""phxio: move data between files and GPU memory from Python.

A thin ctypes layer over libphoenix (no compiler needed to install):

    import phxio
    phxio.devices()                      # what there is
    dev = phxio.Device("cuda:0")         # or "sim0" without a GPU
    buf = dev.alloc(1 << 30)               # device memory, DLPack-able
    phxio.read_into("weights.bin", buf)  # file -> device, no big bounce
    t = torch.empty(n, device="cuda")
    phxio.read_into("x.bin", t, file_offset=4096)
    phxio.read_batch("kv.bin", [(off, size, dest), ...])
    sd = phxio.load_safetensors("ckpt/", device="cuda:0")   # or a file
    sd = phxio.load_safetensors("/mnt/phx/gpu0/ckpt")      # staged: views
    for name, t in phxio.iter_safetensors("ckpt/", "cuda:0"):  # bounded
    phxio.save_safetensors(sd, "out/model.safetensors", max_shard_size="5GB")

Errors are PhoenixError (an OSError): ``errno`` and a one-line message.
"""

from ._core import (Buffer, Device, DeviceArray, DeviceInfo, Stream,
                    Transfer, default_kind, device, devices, read_batch,
                    read_into, version, write_batch, write_from)
from ._dtypes import DTYPES, DType
from ._lib import PhoenixError, lib_dir
from ._phxfs import open_file
from ._phxfs import status as phxfs_status
from ._safetensors import SafetensorsError, read_header
from ._safetensors import load as load_safetensors
from ._save import save as save_safetensors
from ._weights import iter_safetensors

__all__ = [
    "Buffer", "DTYPES", "DType", "Device", "DeviceArray", "DeviceInfo",
    "PhoenixError", "SafetensorsError", "Stream", "Transfer", "default_kind",
    "device", "devices", "iter_safetensors", "lib_dir", "load_safetensors", "open_file", "phxfs_status",
    "read_batch", "read_header", "read_into", "save_safetensors", "version",
    "write_batch", "write_from",
]

# the release: phoenix.h's PHX_VERSION_*, and the wheel's (pyproject and
# mkwheel.py read it here)
__version__ = "0.1.0"
