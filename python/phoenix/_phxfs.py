"""Files of a phxfs mount (/mnt/phx/gpu0/...) as device memory."""

from __future__ import annotations

import errno
import os
from typing import Any

from ._lib import PhoenixError

XATTR_DEVICE = "user.phx.device"
XATTR_PATH = "user.phx.path"


def _xattr(path: str, name: str) -> str:
    try:
        return os.getxattr(path, name).decode()
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP):
            raise PhoenixError(errno.EINVAL, f"{path}: not a file of a "
                               f"phxfs mount (no {name} attribute)") from None
        raise PhoenixError(exc.errno, f"{path}: {exc.strerror}") from None


def open_file(path: Any) -> Any:
    """A zero-copy Buffer for a file that phxfs keeps in device memory."""
    path = os.fspath(path)
    _xattr(path, XATTR_DEVICE)
    raise PhoenixError(errno.ENOSYS, f"{path}: this phxfs does not offer "
                       "its allocations to other processes yet")
