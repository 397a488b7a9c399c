"""Memory the analysis has freed, given back to the system between its steps.

NumPy's arrays come from the C library's allocator, which keeps what a step frees for the
next allocation rather than returning it: after the word-association tables of a store ten
times the paper's grid it kept some 130 MB that no later step reused, and each allocation
table left more, so that the next table started from a higher floor. glibc returns it on
request (`malloc_trim`, the call Dask's workers make for the same reason); other C libraries
(macOS's, musl) have no such call, and there this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable


@functools.cache
def _trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        found: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl, or no C library to load
        return None
    return found


def release() -> None:
    """Give the memory freed so far back to the system, where the C library can."""
    trim = _trim()
    if trim is not None:
        trim(0)
