"""The chaos suite's own tool works: a tmpfs really fills up and really unmounts."""

from __future__ import annotations

import errno
import os
from typing import Any


def test_tmpfs_fills_to_enospc_and_unmounts_lazily(tmpfs: Any) -> None:
    fs = tmpfs("root", size_kib=1024)
    assert os.path.ismount(fs.path)
    fs.fill()
    err = None
    try:
        with open(fs.path / "one_more", "wb") as fh:
            fh.write(b"x" * 65536)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        err = exc.errno
    assert err == errno.ENOSPC
    fs.unmount_lazy()
    assert not os.path.ismount(fs.path)
    assert list(fs.path.iterdir()) == []
