"""The GGUF format's numbering: metadata value types, ggml tensor types, file types.

Upstream ggml's numbering, plus the tensor types and file types of ik_llama.cpp (8337e4c) that
its own quants (IQ4_KS, IQ4_K, ...) are written with: ids that upstream does not use, so a file
of either engine reads with one table. The file types whose ids ik numbers differently from
upstream (its 38 and 41) are only in ``IK_FILE_TYPES``.
"""

from __future__ import annotations

from enum import IntEnum


class GGUFValueType(IntEnum):
    """The type id of a metadata value in a GGUF header (the GGUF specification)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# ggml tensor type id -> (name, elements per block, bytes per block), as ggml defines them.
TENSOR_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
    # ik_llama.cpp's own types (its ggml/include/ggml.h ids; ggml.c type_traits blck_size and
    # type_size, the sizes of its ggml-common.h blocks)
    133: ("Q6_0", 32, 26),
    137: ("IQ2_K", 256, 76),
    138: ("IQ3_K", 256, 110),
    139: ("IQ4_K", 256, 144),
    140: ("IQ5_K", 256, 176),
    141: ("IQ6_K", 256, 212),
    144: ("IQ4_KS", 256, 136),
    146: ("IQ4_KSS", 256, 128),
    152: ("IQ5_KS", 256, 168),
}

# ggml tensor type id -> bytes each row carries before its blocks (ik_llama.cpp's
# ``row_meta_size``: the row's float scale); types not named here have none.
ROW_META_BYTES: dict[int, int] = {
    144: 4,  # IQ4_KS
    146: 4,  # IQ4_KSS
    152: 4,  # IQ5_KS
}


def tensor_bytes(type_id: int, ne: tuple[int, ...]) -> int:
    """The bytes of a tensor of ggml type ``type_id`` and ggml shape ``ne`` (fastest dimension
    first): each of its rows (the product of ``ne[1:]``) holds its row metadata, then ``ne[0]``
    elements in blocks. Raises KeyError for a type id ``TENSOR_TYPES`` lacks."""
    _name, block, size = TENSOR_TYPES[type_id]
    row_len = ne[0] if ne else 1
    rows = 1
    for dim in ne[1:]:
        rows *= dim
    return rows * (ROW_META_BYTES.get(type_id, 0) + row_len // block * size)


class GGMLType(IntEnum):
    """A ggml tensor type: the ids of ``TENSOR_TYPES`` by name (gguf's GGMLQuantizationType,
    without importing gguf and numpy, and ik_llama.cpp's own types, which gguf lacks)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q6_0 = 133
    IQ2_K = 137
    IQ3_K = 138
    IQ4_K = 139
    IQ5_K = 140
    IQ6_K = 141
    IQ4_KS = 144
    IQ4_KSS = 146
    IQ5_KS = 152


# general.file_type id -> name (llama.cpp's llama_ftype, and ik_llama.cpp's where upstream has no
# such id).
FILE_TYPES: dict[int, str] = {
    0: "ALL_F32",
    1: "MOSTLY_F16",
    2: "MOSTLY_Q4_0",
    3: "MOSTLY_Q4_1",
    7: "MOSTLY_Q8_0",
    8: "MOSTLY_Q5_0",
    9: "MOSTLY_Q5_1",
    10: "MOSTLY_Q2_K",
    11: "MOSTLY_Q3_K_S",
    12: "MOSTLY_Q3_K_M",
    13: "MOSTLY_Q3_K_L",
    14: "MOSTLY_Q4_K_S",
    15: "MOSTLY_Q4_K_M",
    16: "MOSTLY_Q5_K_S",
    17: "MOSTLY_Q5_K_M",
    18: "MOSTLY_Q6_K",
    19: "MOSTLY_IQ2_XXS",
    20: "MOSTLY_IQ2_XS",
    21: "MOSTLY_Q2_K_S",
    22: "MOSTLY_IQ3_XS",
    23: "MOSTLY_IQ3_XXS",
    24: "MOSTLY_IQ1_S",
    25: "MOSTLY_IQ4_NL",
    26: "MOSTLY_IQ3_S",
    27: "MOSTLY_IQ3_M",
    28: "MOSTLY_IQ2_S",
    29: "MOSTLY_IQ2_M",
    30: "MOSTLY_IQ4_XS",
    31: "MOSTLY_IQ1_M",
    32: "MOSTLY_BF16",
    33: "MOSTLY_Q4_0_4_4",  # upstream's removed repacked types, which ik keeps
    34: "MOSTLY_Q4_0_4_8",
    35: "MOSTLY_Q4_0_8_8",
    36: "MOSTLY_TQ1_0",
    37: "MOSTLY_TQ2_0",
    38: "MOSTLY_MXFP4_MOE",
    39: "MOSTLY_NVFP4",
    40: "MOSTLY_Q1_0",
    # ik_llama.cpp's file types whose ids upstream does not use (its include/llama.h)
    135: "MOSTLY_Q6_0",
    136: "MOSTLY_IQ1_BN",
    137: "MOSTLY_IQ2_BN",
    138: "MOSTLY_IQ2_K",
    139: "MOSTLY_IQ3_K",
    140: "MOSTLY_IQ4_K",
    141: "MOSTLY_IQ5_K",
    142: "MOSTLY_IQ6_K",
    145: "MOSTLY_IQ4_KS",
    146: "MOSTLY_IQ3_KL",
    147: "MOSTLY_IQ2_KS",
    148: "MOSTLY_IQ4_KSS",
    149: "MOSTLY_Q8_KV",
    150: "MOSTLY_IQ5_KS",
    151: "MOSTLY_IQ2_KT",
    152: "MOSTLY_IQ3_KT",
    153: "MOSTLY_IQ4_KT",
    154: "MOSTLY_IQ3_KS",
    155: "MOSTLY_IQ2_KL",
    156: "MOSTLY_IQ1_KT",
    202: "MOSTLY_Q4_0_R8",
    207: "MOSTLY_Q8_0_R8",
    208: "MOSTLY_Q5_0_R4",
    210: "MOSTLY_Q2_K_R4",
    211: "MOSTLY_Q3_K_R4",
    214: "MOSTLY_Q4_K_R4",
    216: "MOSTLY_Q5_K_R4",
    218: "MOSTLY_Q6_K_R4",
    219: "MOSTLY_IQ2_XXS_R4",
    220: "MOSTLY_IQ2_XS_R4",
    223: "MOSTLY_IQ3_XXS_R4",
    224: "MOSTLY_IQ1_S_R4",
    225: "MOSTLY_IQ4_NL_R4",
    226: "MOSTLY_IQ3_S_R4",
    229: "MOSTLY_IQ2_M_R4",
    230: "MOSTLY_IQ4_XS_R8",
    231: "MOSTLY_IQ1_M_R4",
    232: "MOSTLY_BF16_R16",
    335: "MOSTLY_Q6_0_R4",
    337: "MOSTLY_IQ2_BN_R4",
    338: "MOSTLY_IQ2_K_R4",
    339: "MOSTLY_IQ3_K_R4",
    340: "MOSTLY_IQ4_K_R4",
    341: "MOSTLY_IQ5_K_R4",
    345: "MOSTLY_IQ4_KS_R4",
    350: "MOSTLY_IQ5_KS_R4",
    351: "MOSTLY_MXFP4_R8",
    398: "MOSTLY_Q8_KV_R8",
    399: "MOSTLY_Q8_K_R8",
    1024: "GUESSED",
}

# general.file_type id -> name in ik_llama.cpp's own numbering (its llama_ftype, 8337e4c). Its
# 38 (MOSTLY_MXFP4) and 41 (MOSTLY_Q1_0_G128) mean other things upstream (MXFP4_MOE, Q2_0), so
# an ik file's id is looked up here, not in FILE_TYPES.
IK_FILE_TYPES: dict[int, str] = {
    **{i: n for i, n in FILE_TYPES.items() if i <= 35 or i >= 135},
    38: "MOSTLY_MXFP4",
    41: "MOSTLY_Q1_0_G128",
}
