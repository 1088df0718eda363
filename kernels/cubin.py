"""Read what ptxas decided from a cubin (an ELF file), with no CUDA tools installed.

Per kernel: registers per thread (``EIATTR_REGCOUNT`` in ``.nv.info``) and the local-memory stack
frame (``EIATTR_FRAME_SIZE``): a frame above zero means the kernel uses local
memory, i.e. registers spilled or an array was indexed at run time.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4


@dataclass
class KernelResources:
    name: str
    registers: int
    frame_bytes: int  # local memory per thread (spills, stack arrays)


def _sections(elf: bytes):
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = []
    for h in heads:
        start = strtab[4] + h[0]
        names.append(elf[start:elf.index(b"\0", start)].decode())
    # (name, type, flags, addr, offset, size, link, info, align, entsize)
    return [(n,) + h[1:] for n, h in zip(names, heads)]


def _symbols(elf: bytes, secs):
    symtab = next(s for s in secs if s[1] == 2)  # SHT_SYMTAB
    strtab = secs[symtab[6]]
    syms = []
    for off in range(symtab[4], symtab[4] + symtab[5], 24):
        name_off, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", elf, off)
        start = strtab[4] + name_off
        syms.append(elf[start:elf.index(b"\0", start)].decode())
    return syms


def kernel_resources(elf: bytes) -> list[KernelResources]:
    """Registers and local-memory frame of every kernel in the cubin."""
    secs = _sections(elf)
    syms = _symbols(elf, secs)
    regs, frames = {}, {}
    for name, typ, flags, addr, offset, size, link, info, align, entsize in secs:
        if name.startswith(".text."):
            regs.setdefault(name[6:], 0)
        if name == ".nv.info":
            pos = offset
            while pos < offset + size:
                fmt, attr = elf[pos], elf[pos + 1]
                if fmt == EIFMT_SVAL:
                    length, = struct.unpack_from("<H", elf, pos + 2)
                    if attr in (EIATTR_FRAME_SIZE, EIATTR_REGCOUNT) and length == 8:
                        sym, val = struct.unpack_from("<II", elf, pos + 4)
                        if attr == EIATTR_FRAME_SIZE:
                            frames[syms[sym]] = val
                        else:
                            regs[syms[sym]] = val
                    pos += 4 + length
                elif fmt in (EIFMT_HVAL, EIFMT_BVAL):
                    pos += 4
                else:
                    pos += 2
    return [KernelResources(k, regs[k], frames.get(k, 0)) for k in regs]


def text_hash(elf: bytes) -> str:
    """A short hash of the machine code alone (the ``.text`` sections): equal for two cubins of the
    same instructions whatever their debug and line information."""
    return hashlib.sha1(b"".join(elf[s[4]:s[4] + s[5]] for s in _sections(elf)
                                 if s[0].startswith(".text"))).hexdigest()[:12]
