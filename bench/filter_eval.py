"""What rtd's compiled seccomp filter answers to a call, computed from its BPF bytes: the classic
BPF subset libseccomp emits (load a word of seccomp_data, AND, compare and jump, return),
every program of a variant run and the strictest answer kept, as the kernel does. bench's GPU
check uses it to sort the calls strace saw CUDA make against the filter that would have
answered them, not against a second copy of its rules."""
import ctypes
import platform
import struct

import pyseccomp as sc

from rtd.sandbox import seccomp

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[platform.machine()]
ACTIONS = {0x80000000: "kill", 0x00000000: "kill", 0x00030000: "trap", 0x00050000: "errno",
           0x7FC00000: "notify", 0x7FF00000: "trace", 0x7FFC0000: "log", 0x7FFF0000: "allow"}
LD_W_ABS, ALU_AND_K, JMP_JEQ_K, JMP_JGE_K, JMP_JGT_K, JMP_JSET_K, JMP_JA, RET_K = 0x20, 0x54, 0x15, 0x35, 0x25, 0x45, 0x05, 0x06


def _run(program: bytes, data: bytes) -> int:
    code = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    a, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == LD_W_ABS:
            a = struct.unpack_from("<I", data, k)[0]
        elif op == ALU_AND_K:
            a &= k
        elif op in (JMP_JEQ_K, JMP_JGE_K, JMP_JGT_K, JMP_JSET_K):
            taken = {JMP_JEQ_K: a == k, JMP_JGE_K: a >= k, JMP_JGT_K: a > k, JMP_JSET_K: bool(a & k)}[op]
            pc += jt if taken else jf
        elif op == JMP_JA:
            pc += k
        elif op == RET_K:
            return k
        else:
            raise ValueError(f"BPF opcode {op:#x} is outside what libseccomp emits for rtd's filters")


def verdict(variant: str, name: str, args: tuple = ()) -> tuple[str, int]:
    """(action, data) the variant's filter gives the call `name` with these arguments."""
    nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
    args = tuple(args[:6]) + (0,) * (6 - len(args[:6]))
    data = struct.pack("<iIQ6Q", nr, AUDIT_ARCH, 0, *(ctypes.c_uint64(a).value for a in args))
    answers = [_run(p, data) for p in seccomp.compiled(variant).programs]
    strictest = min(answers, key=lambda r: ctypes.c_int32(r & 0xFFFF0000).value)
    return ACTIONS[strictest & 0xFFFF0000], strictest & 0xFFFF
