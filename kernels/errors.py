"""Bad values the kernels find on the GPU, reported without waiting for the GPU.

Some input can only be checked where it is read: a target class outside [0, N) is a value in
device memory. Reading it back on the host would make every call wait for the GPU (and could
not be captured in a CUDA graph), so the kernel reports it itself: it writes 1 into the op's
word of pinned host memory that every device can write to (mapped, portable), and the row's
result becomes NaN. The host reads that word for free:

* every later call of an op that can raise it checks the word first and raises
  :class:`BadInputError` (then clears it): a bad call is reported by the next call that starts
  after its kernel finished;
* :func:`check_errors` waits for the GPU and raises at once, for a check at a point of your
  choosing (the end of a step, a test).

A kernel in a CUDA graph writes the same word on every replay.
"""
from __future__ import annotations

import ctypes

#: The word each check writes (an index into the flags).
CROSS_ENTROPY_TARGET = 0
_MESSAGES = {
    CROSS_ENTROPY_TARGET: "cross_entropy: a target was outside [0, N) and not ignore_index; its loss is NaN",
}
_WORDS = 16


class BadInputError(ValueError):
    """An earlier launch found input it cannot compute with (see :mod:`kernels.errors`)."""


class _Flags:
    """The words of pinned host memory the kernels write, allocated on first use."""

    def __init__(self):
        self.host = None  # ctypes array of int32 over the host memory
        self.device_address = 0

    def address(self, word: int) -> int:
        """The device address of word ``word`` (the same on every device: portable, mapped)."""
        if self.host is None:
            from cuda.bindings import driver

            flags = driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE
            err, ptr = driver.cuMemHostAlloc(4 * _WORDS, flags)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuMemHostAlloc failed: {err}")
            err, dptr = driver.cuMemHostGetDevicePointer(ptr, 0)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuMemHostGetDevicePointer failed: {err}")
            self.host = (ctypes.c_int32 * _WORDS).from_address(int(ptr))
            ctypes.memset(self.host, 0, 4 * _WORDS)
            self.device_address = int(dptr)
        return self.device_address + 4 * word

    def raise_if_set(self, word: int | None = None) -> None:
        """Raise (and clear) what the kernels flagged in ``word`` (None: any); one host read."""
        host = self.host
        if host is None:
            return
        words = _MESSAGES if word is None else (word,)
        raised = [w for w in words if host[w]]
        if raised:
            for w in raised:
                host[w] = 0
            raise BadInputError("; ".join(_MESSAGES[w] for w in raised) +
                                " (reported by the first call after that launch finished)")


FLAGS = _Flags()


class _Word:
    """One word of the flags as a CUDA array (``__cuda_array_interface__``), for torch."""

    def __init__(self, address: int):
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<i4", "data": (address, False),
                                         "version": 3}


def report(word: int, bad) -> None:
    """Report the rows of a boolean tensor ``bad`` as the kernels report theirs, for checks made
    with torch ops: on a CUDA device ``bad.any()`` is or-ed into ``word`` on the GPU (no wait:
    the next call that checks the word raises, as after a kernel's report); on the CPU the
    value is at hand, so this raises :class:`BadInputError` at once."""
    import torch

    if bad.device.type != "cuda":
        if bool(bad.any()):
            raise BadInputError(_MESSAGES[word])
        return
    flag = torch.as_tensor(_Word(FLAGS.address(word)), device=bad.device)
    flag.bitwise_or_(bad.any().to(torch.int32))


def check_errors() -> None:
    """Wait for the GPU, then raise :class:`BadInputError` if any kernel found bad input since
    the last report."""
    import torch

    if FLAGS.host is not None:
        torch.cuda.synchronize()
        FLAGS.raise_if_set()
