"""A JPEG's size from its headers, without decoding (docs/top-camera.md).

The top-camera writer sizes its Matroska stream from the first frame, and the export checks
that every stored frame is a whole JPEG of one size; both read only the frame header, since
decoding every frame would cost as much as the work itself.
"""

from __future__ import annotations

__all__ = ["jpeg_size"]

#: start-of-frame markers (baseline, extended, progressive, lossless...): they carry the size
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
#: a camera may pad a frame after its end marker; the marker must lie in this tail
_EOI_TAIL = 4096


def jpeg_size(data: bytes, *, whole: bool = False) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header; None when it is not a JPEG with one.

    ``whole``: also require the end marker near the end (a frame cut short is not whole)."""
    if len(data) < 4 or data[:2] != b"\xff\xd8":
        return None
    if whole and b"\xff\xd9" not in data[-_EOI_TAIL:]:
        return None
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            i += 2
            continue
        seg = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _SOF:
            if i + 9 > n:
                return None
            height = int.from_bytes(data[i + 5 : i + 7], "big")
            width = int.from_bytes(data[i + 7 : i + 9], "big")
            return (width, height) if width > 0 and height > 0 else None
        if marker == 0xDA or seg < 2:  # scan data before any frame header
            return None
        i += 2 + seg
    return None
