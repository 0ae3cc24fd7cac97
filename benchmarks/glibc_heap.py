"""glibc's own count of the process's memory (`mallinfo2`, glibc 2.33 or later; Linux only).

Shared by memory_parts.py and heap_retention.py: the bytes malloc has handed out, heap and mapped,
and the free bytes its heap keeps.
"""

from __future__ import annotations

import ctypes


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.mallinfo2.restype = _MallInfo2


def heap_bytes() -> tuple[int, int, int]:
    """(bytes in use, heap and mapped; of them mapped; free bytes the heap keeps)."""
    m = _LIBC.mallinfo2()
    return m.uordblks + m.hblkhd, m.hblkhd, m.fordblks
