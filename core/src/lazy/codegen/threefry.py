"""`Ops.THREEFRY` as primitive uint32 UOps: the twenty rounds of Threefry-2x32 (adds, rotations as two shifts and an
or, xors) for either output word. Both words of one counter and key share every UOp but the last (the builder's
cache), so a kernel that selects between them computes the rounds once."""

from __future__ import annotations

from lazy.codegen.transcendental import VectorMath
from lazy.codegen.uops import UOp, UOpBuilder
from lazy.ops import THREEFRY_PARITY, THREEFRY_ROTATIONS


def lower_threefry(builder: UOpBuilder, srcs: list[UOp], word: int) -> UOp:
    """Word `word` (0 or 1) of Threefry-2x32 of the counter (srcs[0], srcs[1]) under the key (srcs[2], srcs[3]):
    uint32 values of one vector width. `lazy.ops.threefry2x32` is the reference."""
    x0, x1, k0, k1 = srcs
    assert x0.dtype is not None
    math = VectorMath(builder, x0.dtype.count)
    ks = (k0, k1, math.bit_xor(math.bit_xor(k0, k1), THREEFRY_PARITY))
    x0, x1 = math.add(x0, ks[0]), math.add(x1, ks[1])
    for i in range(5):
        for r in THREEFRY_ROTATIONS[i % 2]:
            x0 = math.add(x0, x1)
            x1 = math.bit_xor(math.bit_or(math.shl(x1, r), math.shr(x1, 32 - r)), x0)
        x0 = math.add(x0, ks[(i + 1) % 3])
        x1 = math.add(math.add(x1, ks[(i + 2) % 3]), i + 1)
    return x0 if word == 0 else x1
