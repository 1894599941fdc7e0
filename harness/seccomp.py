"""The seccomp filter every sandboxed worker runs under (bwrap's --seccomp): the system calls a candidate could use to
leave its sandbox through the kernel's side doors fail, everything else is allowed.

Refused, with EPERM unless said: new user namespaces (unshare or clone with CLONE_NEWUSER; bwrap's --disable-userns
cannot be combined with a mapping written from outside); sockets of any family but IPv4, IPv6 (the sandbox's own
network namespace, loopback only) and netlink's routing protocol (getaddrinfo asks it): so no AF_VSOCK (the host's
vsock services share one port space with it), no AF_UNIX socket at all, since a filter cannot read the address a
`connect` or `sendto` names and a path there reaches any unix socket the sandbox can see (abstract ones are the
network namespace's own, but go with them); socketpair only of connected kinds (stream, seqpacket: a datagram pair can
`sendto` a path); io_uring (ENOSYS: its operations create and connect sockets past this filter); clone3 (ENOSYS:
its flags are out of a filter's reach; libc falls back to clone); another architecture's calls (i386, x32) end the
process or fail. A GPU worker's filter allows AF_UNIX until the worker has started CUDA, then the worker adds this
one on all its threads (`close_unix`), before any candidate code. glibc copes with a refused unix socket (nscd,
syslog), and nothing the harness or torch runs in a worker needs one; Landlock's LANDLOCK_ACCESS_FS_RESOLVE_UNIX (kernels after 6.19) could refuse only the paths.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import struct

_LD_W_ABS, _ALU_AND_K, _JA, _JEQ, _JGE, _JSET, _RET = 0x20, 0x54, 0x05, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
EPERM, ENOSYS = 1, 38
CLONE_NEWUSER = 0x10000000
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCK_STREAM, SOCK_SEQPACKET, SOCK_TYPE_MASK = 1, 5, 0xF
NETLINK_ROUTE = 0
# seccomp_data: nr at 0, arch at 4, args[i]'s low word at 16 + 8 i (little-endian; these arguments are ints)
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    return 16 + 8 * index


# machine: audit arch, first x32 call (0: none), and the numbers of the calls the filter looks at
_MACHINES = {
    "x86_64": (0xC000003E, 0x40000000, {"socket": 41, "socketpair": 53, "clone": 56, "unshare": 272, "clone3": 435,
                                        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}),
    "aarch64": (0xC00000B7, 0, {"socket": 198, "socketpair": 199, "clone": 220, "unshare": 97, "clone3": 435,
                                "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}),
}


@functools.lru_cache(maxsize=2)
def program(unix: bool = False) -> bytes | None:
    """The filter as classic BPF, ready for bwrap's --seccomp; None on machines it does not know. `unix`: AF_UNIX
    sockets too, for a GPU worker while the driver starts (`close_unix`)."""
    known = _MACHINES.get(platform.machine())
    return None if known is None else assemble(_instructions(*known, unix=unix))


# seccomp(2): its number per machine, the operation that adds a filter, and the flag that puts it on every thread
_SECCOMP_CALL = {"x86_64": 317, "aarch64": 277}
_SET_MODE_FILTER, _FILTER_FLAG_TSYNC, _PR_SET_NO_NEW_PRIVS = 1, 1, 38


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def close_unix() -> None:
    """Add the filter without AF_UNIX to every thread of this process (filters stack: the stricter answer wins).
    A GPU worker starts under `program(unix=True)`: the CUDA driver of the H100 of 2026-12-07 failed to start
    (error 304) where AF_UNIX sockets were refused, so its worker starts CUDA first, then calls this before any
    candidate code runs. On every thread at once (TSYNC): the driver's own threads run a candidate's host callbacks.
    Ends the process when it cannot, rather than run a candidate with the door open. What it leaves: a socket the
    driver connected before the close (to an MPS server, on a machine that runs one) stays open in the process."""
    code = program(unix=False)
    number = _SECCOMP_CALL.get(platform.machine())
    if code is None or number is None:
        raise SystemExit("no seccomp filter for this machine's architecture")
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(code, len(code))
    filters = _Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(
            number, _SET_MODE_FILTER, _FILTER_FLAG_TSYNC, ctypes.byref(filters)) != 0:
        raise SystemExit(f"the worker could not close its filter to unix sockets (errno {ctypes.get_errno()})")


def _instructions(arch: int, x32: int, calls: dict[str, int], unix: bool = False) -> list[tuple]:
    """(code, jump-if-true label, jump-if-false label, k) with labels resolved by `assemble`; a label is a str,
    0 falls through."""
    refuse, unsupported = _ERRNO | EPERM, _ERRNO | ENOSYS
    code = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ, "nr", 0, arch), (_RET, 0, 0, _KILL),
            ("nr",), (_LD_W_ABS, 0, 0, _NR)]
    if x32:
        code += [(_JGE, "refuse", 0, x32)]
    for name in ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"):
        code += [(_JEQ, "unsupported", 0, calls[name])]
    code += [(_JEQ, "socket", 0, calls["socket"]), (_JEQ, "socketpair", 0, calls["socketpair"]),
             (_JEQ, "namespace", 0, calls["unshare"]), (_JEQ, "namespace", 0, calls["clone"]),
             (_RET, 0, 0, _ALLOW),
             ("namespace",), (_LD_W_ABS, 0, 0, _arg(0)), (_JSET, "refuse", 0, CLONE_NEWUSER), (_RET, 0, 0, _ALLOW),
             ("socket",), (_LD_W_ABS, 0, 0, _arg(0)), (_JEQ, "allow", 0, AF_INET), (_JEQ, "allow", 0, AF_INET6),
             *([(_JEQ, "allow", 0, AF_UNIX)] if unix else []),
             (_JEQ, 0, "refuse", AF_NETLINK), (_LD_W_ABS, 0, 0, _arg(2)), (_JEQ, "allow", "refuse", NETLINK_ROUTE),
             ("socketpair",), (_LD_W_ABS, 0, 0, _arg(0)), (_JEQ, 0, "refuse", AF_UNIX), (_LD_W_ABS, 0, 0, _arg(1)),
             (_ALU_AND_K, 0, 0, SOCK_TYPE_MASK), (_JEQ, "allow", 0, SOCK_STREAM),
             (_JEQ, "allow", "refuse", SOCK_SEQPACKET),
             ("allow",), (_RET, 0, 0, _ALLOW),
             ("refuse",), (_RET, 0, 0, refuse),
             ("unsupported",), (_RET, 0, 0, unsupported)]
    return code


def assemble(code: list[tuple]) -> bytes:
    """Pack `code`, whose jumps name labels (1-tuples marking the next instruction) instead of offsets."""
    places, instructions = {}, []
    for item in code:
        if len(item) == 1:
            places[item[0]] = len(instructions)
        else:
            instructions.append(item)

    def offset(target: int | str, at: int) -> int:
        if not isinstance(target, str):
            return target
        jump = places[target] - at - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"jump to {target} out of reach")
        return jump

    return b"".join(struct.pack("=HBBI", code, offset(true, at), offset(false, at), k)
                    for at, (code, true, false, k) in enumerate(instructions))
