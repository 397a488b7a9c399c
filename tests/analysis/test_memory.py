"""`memory.release`: glibc's `malloc_trim` where the C library is glibc, nothing elsewhere."""

from __future__ import annotations

import platform
import sys

import pytest

from ibias.analysis import memory


def test_on_glibc_the_freed_memory_is_given_back() -> None:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")
    memory._trim.cache_clear()
    assert memory._trim() is not None
    memory.release()


def test_without_the_call_release_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    memory._trim.cache_clear()
    try:
        assert memory._trim() is None
        memory.release()  # no C library call to make: returns quietly
    finally:
        memory._trim.cache_clear()
