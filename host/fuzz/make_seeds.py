#!/usr/bin/env python3
"""Writes the seed corpora of the host's fuzz targets (host/fuzz/corpus/<target>/).

The seeds are checked in; run this again only to change them:

    python3 host/fuzz/make_seeds.py

It rewrites the seed-* files and leaves every other file (crash-* inputs saved after a fix,
inputs added by hand) alone. The byte encodings are those documented at the top of each
fuzz_<target>.cc and in fuzz_common.h (Int()).
"""
import json
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# ---- Int() of fuzz_common.h --------------------------------------------------------------------

EDGES = {
    "INT64_MIN": 0xC0, "INT64_MAX": 0xC1, "2^62+1": 0xC2, "INT64_MIN+1": 0xC3, "2^32": 0xC4,
    "2^31-1": 0xC5, "2^32-1": 0xC6, "-2^31": 0xC7, "2^61": 0xC8, "2^61+1": 0xC9, "2^40": 0xCA,
    "2^64-4": 0xCB, "INT64_MAX/2": 0xCC, "INT64_MAX/4+1": 0xCD, "1000000": 0xCE, "-2^60": 0xCF,
}


def i(v):
    """Int() encoding of an int or a named edge value."""
    if isinstance(v, str):
        return bytes([EDGES[v]])
    if 0 <= v < 0x80:
        return bytes([v])
    if -64 <= v < 0:
        return bytes([0x7F - v])
    return bytes([0xF0]) + struct.pack("<q", v)


def ints(*vs):
    return b"".join(i(v) for v in vs)


DTYPES = ["f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"]


def dt(name):
    return DTYPES.index(name)


# ---- fuzz_tensor_view ----------------------------------------------------------------------------

def tv_base(dtype, device, dims):
    return bytes([dt(dtype), device, len(dims)] + list(dims))


def tv_view(base, shape, strides=None, offset=0, ndim=None):
    n = len(shape) if ndim is None else ndim
    out = bytes([0, base, n & 0xFF, 1 if strides is not None else 0]) + ints(*shape)
    if strides is not None:
        out += ints(*strides)
    return out + i(offset)


def tv_seeds():
    read = lambda t: bytes([1, t])
    write = lambda t, seed=0x33: bytes([2, t, seed])
    copy = lambda d, s: bytes([3, d, s])
    destroy = lambda t: bytes([4, t])
    via = lambda t, other: bytes([5, t, other])
    reimport = lambda t, legacy: bytes([6, t, legacy])
    export = lambda t, flags: bytes([7, t, flags])
    stale = bytes([8])
    return {
        # a 2x2 window of a 4x4 matrix, read, written, copied, exported, destroyed
        "seed-window": tv_base("f32", 0, [4, 4]) + tv_view(0, [2, 2], [4, 1], 5) + read(1) +
        write(1) + copy(1, 1) + via(1, 1) + reimport(1, 0) + export(0, 1) + destroy(0) + read(1) +
        stale,
        # every other element of a vector in the device space (the strided copy paths)
        "seed-device-strided": tv_base("i16", 1, [8]) + tv_view(0, [4], [2], 1) + write(1, 7) +
        read(1) + via(1, 0) + copy(0, 0),
        # a transposed view, and a view of the view at a negative offset
        "seed-transpose": tv_base("f64", 0, [3, 4]) + tv_view(0, [4, 3], [1, 4]) +
        tv_view(1, [2], [4], 0) + tv_view(2, [2], [1], -1) + read(3) + write(2) + read(1),
        # broadcast: stride 0 over a single element, written twice over
        "seed-broadcast": tv_base("u8", 0, [1]) + tv_view(0, [3, 5], [0, 0]) + write(1, 9) +
        read(1) + read(0),
        # edge values the host must refuse: offset INT64_MIN, 2^62+1, huge strides, rank 33
        "seed-edges": tv_base("f32", 0, [4]) + tv_view(0, [1], None, "INT64_MIN") +
        tv_view(0, [1], None, "2^62+1") + tv_view(0, [2], ["INT64_MAX"], 0) +
        tv_view(0, [2, 2], ["2^62+1", 1], 0) + tv_view(0, [1] * 33) +
        tv_view(0, [-1]) + read(0),
        # empty views at the ends of the storage and just outside it
        "seed-empty": tv_base("bool", 0, [2, 3]) + tv_view(0, [0], None, -1) +
        tv_view(0, [0], None, 6) + tv_view(0, [0, 3], [3, 1], 7) + tv_view(0, [], None, 5) +
        read(0),
        # a DLPack round trip, then views of the re-imported tensor
        "seed-reimport": tv_base("i32", 1, [2, 4]) + tv_view(0, [2, 2], [4, 2], 1) +
        reimport(1, 1) + tv_view(2, [2], [4], 0) + tv_view(2, [3], [1], 0) + read(3) +
        export(2, 0) + export(3, 3) + destroy(1) + destroy(0) + write(1),
    }


# ---- fuzz_dlpack_import ----------------------------------------------------------------------------

def dl_case(kind=0, major=0, minor=0, flags=0, shape=(4, 4), strides=None, byte_offset=0,
            dtype="f32", raw_dtype=None, device_id=0, device_raw=None):
    if strides is not None:
        kind |= 4
    out = bytes([kind])
    if (kind >> 5) == 7:
        out += i(device_raw)
    out += ints(major, minor, flags, len(shape), *shape)
    if strides is not None:
        out += ints(*strides)
    out += i(byte_offset)
    if raw_dtype is not None:
        out += bytes([0xF0] + list(raw_dtype))
    else:
        out += bytes([dt(dtype)])
    return out + bytes([device_id & 0xFF])


def dl_seeds():
    read = lambda t: bytes([0, t])
    write = lambda t, seed=0x21: bytes([1, t, seed])
    view = tv_view  # the same operands as fuzz_tensor_view's view
    def view_op(base, shape, strides=None, offset=0):
        return bytes([2]) + view(base, shape, strides, offset)[1:]
    export = lambda t, legacy: bytes([3, t, legacy])
    reimport = lambda x: bytes([4, x])
    destroy = lambda t: bytes([5, t])
    release = lambda x: bytes([6, x])
    copy = lambda d, s: bytes([7, d, s])
    LEGACY, NULL_DELETER, NULL_DATA, READ_ONLY = 1, 2, 8, 16
    EXTDEV, CUDA, CUDAHOST, RAWDEV = 4 << 5, 5 << 5, 6 << 5, 7 << 5
    return {
        "seed-versioned": dl_case() + read(0) + write(0) + view_op(0, [2, 2], [4, 1], 5) +
        read(1) + export(1, 0) + reimport(0) + copy(2, 1) + destroy(0) + release(0) + read(0),
        "seed-legacy-strided": dl_case(kind=LEGACY, shape=(3, 2), strides=(1, 3),
                                       byte_offset=8, dtype="i16") + read(0) + write(0, 3) +
        export(0, 1) + export(0, 0) + release(1) + reimport(0) + destroy(0) + read(0),
        "seed-read-only": dl_case(kind=READ_ONLY, shape=(8,), dtype="u8") + write(0) +
        copy(0, 0) + export(0, 0) + reimport(0) + write(1),
        "seed-null-deleter": dl_case(kind=NULL_DELETER, shape=(2, 2, 2), dtype="f64") + read(0) +
        view_op(0, [8], None, 0) + destroy(0),
        "seed-device": dl_case(kind=EXTDEV, shape=(5,)) + read(0) + export(0, 0),
        "seed-cuda-host": dl_case(kind=CUDAHOST, shape=(2, 3), dtype="bf16") + read(0) +
        write(0),
        "seed-empty-null-data": dl_case(kind=NULL_DATA, shape=(0, 5)) + read(0) +
        view_op(0, [0], None, -1) + export(0, 1),
        # what must be refused: another major, unknown dtypes, negative sizes, null data
        "seed-major-2": dl_case(major=1),
        "seed-unknown-dtype": dl_case(raw_dtype=(2, 32, 4, 0)),
        "seed-negative-dim": dl_case(shape=(2, -3)),
        "seed-null-data": dl_case(kind=NULL_DATA | LEGACY, shape=(1,)),
        "seed-rank-33": dl_case(shape=(1,) * 33),
        # the overflows: byte_offset 2^64-4, huge strides, shape x stride past int64
        "seed-offset-near-2p64": dl_case(shape=(1,), byte_offset="2^64-4") + read(0) +
        view_op(0, [1], None, 1),
        "seed-huge-strides": dl_case(kind=LEGACY, shape=(2, 2), strides=("INT64_MAX", 1)) +
        view_op(0, [1], None, 0),
        "seed-stride-overflow": dl_case(shape=(3,), strides=("2^62+1",)) + read(0),
        "seed-raw-device": dl_case(kind=RAWDEV, device_raw=13, shape=(4,)) + read(0) + write(0),
        "seed-cuda": dl_case(kind=CUDA, shape=(4,)) + read(0) + export(0, 1) + reimport(0),
    }


# ---- fuzz_safetensors_load ---------------------------------------------------------------------------

def st_file(entries, data, metadata=None, pad=0, raw_header=None):
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    header.update(entries)
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":"))
    text = text.encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + data


def st_seeds():
    f32 = lambda *vs: struct.pack("<%df" % len(vs), *vs)
    return {
        "seed-one-f32": st_file({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
                                f32(1, 2, 3, 4)),
        "seed-metadata": st_file(
            {"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},
             "b": {"dtype": "U8", "shape": [3], "data_offsets": [8, 11]}},
            struct.pack("<q", -5) + b"\x01\x02\x03", metadata={"format": "pt", "k": "v\u00e9"},
            pad=5),
        "seed-every-dtype": st_file(
            {"f64": {"dtype": "F64", "shape": [], "data_offsets": [0, 8]},
             "f16": {"dtype": "F16", "shape": [1], "data_offsets": [8, 10]},
             "bf16": {"dtype": "BF16", "shape": [1], "data_offsets": [10, 12]},
             "i32": {"dtype": "I32", "shape": [1], "data_offsets": [12, 16]},
             "i16": {"dtype": "I16", "shape": [1], "data_offsets": [16, 18]},
             "i8": {"dtype": "I8", "shape": [1], "data_offsets": [18, 19]},
             "bool": {"dtype": "BOOL", "shape": [2], "data_offsets": [19, 21]}},
            struct.pack("<d", 0.5) + b"\x00\x3c" + b"\x80\x3f" + struct.pack("<i", 7) +
            b"\x02\x00" + b"\xff" + b"\x01\x00"),
        "seed-empty-tensors": st_file(
            {"e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},
             "z": {"dtype": "I8", "shape": [0], "data_offsets": [0, 0]}}, b""),
        "seed-no-tensors": st_file({}, b"", metadata={"only": "metadata"}),
        "seed-escapes": st_file(
            {"q\"\\\n\u2603": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\x07"),
        # malformed: overlap, a hole, a bad bool, a lying header length, truncation
        "seed-overlap": st_file(
            {"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
             "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, b"\x00" * 3),
        "seed-hole": st_file({"a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}},
                             b"\x00\x00"),
        "seed-bad-bool": st_file({"a": {"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]}},
                                 b"\x02"),
        "seed-header-too-long": struct.pack("<Q", 1 << 40) + b"{}",
        "seed-truncated": st_file({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
                                  f32(1, 2)),
        "seed-huge-shape": st_file(
            {"a": {"dtype": "F32", "shape": [4611686018427387905, 4], "data_offsets": [0, 0]}},
            b""),
        "seed-bad-json": st_file({}, b"", raw_header='{"a":{"dtype":"F32","shape":[1],'
                                 '"data_offsets":[0,4],"a":1}'),
    }


# ---- fuzz_certificate --------------------------------------------------------------------------------

def cert_seeds():
    sha = "0123456789abcdef" * 4
    good = ("deepx-certificate 1\nplugin fuzz\nsha256 %s\nsuite 1.0\n"
            "build x86-64-v3\nbuild baseline\n"
            "kernel dx.add 1 73730,73730,73730\nkernel dx.sum 1 73730,73730\n" % sha)
    return {
        "seed-valid": good,
        "seed-comments": "deepx-certificate 1\n# a comment\n\nplugin fuzz\nsha256 %s\n"
                         "future-key whatever it says\n" % sha,
        "seed-bad-dtype": good + "kernel dx.mul 1 73730,,x\n",
        "seed-bad-kernel": good + "kernel dx.mul\n",
        "seed-empty-build": good + "build\n",
        "seed-dtype-overflow": good + "kernel dx.mul 1 4294967296,18446744073709551616\n",
        "seed-other-plugin": good.replace("plugin fuzz", "plugin cpu"),
        "seed-short-sha": good.replace(sha, sha[:10]),
        "seed-wrong-magic": good.replace("deepx-certificate 1", "deepx-certificate 2"),
        "seed-crlf": good.replace("\n", "\r\n"),
        # Format 2 (certificate/README.md): every line `deepx certify` writes, signed. The
        # signature is a constant made once with a throwaway key (id below; openssl pkeyutl).
        "seed-v2-signed": V2_BODY % (sha, "fedcba9876543210" * 4) + "signed-by " + V2_KEY_ID + "\n" +
                          "signature " + V2_SIGNATURE + "\n",
        "seed-v2-unsigned": V2_BODY % (sha, "fedcba9876543210" * 4),
        "seed-v2-after-signature": V2_BODY % (sha, "fedcba9876543210" * 4) + "signed-by " + V2_KEY_ID +
                                   "\nsignature " + V2_SIGNATURE + "\nkernel dx.mul 1 1\n",
        "seed-v2-duplicate-verdict": V2_BODY % (sha, "0" * 64) + "verdict NOT CERTIFIED\n",
        "seed-v2-bad-library": V2_BODY % (sha, "0" * 64) + "library libm.so.6\n",
    }


V2_BODY = ("deepx-certificate 2\nplugin fuzz\nsha256 %s\nsuite 0.1.0\nbuild deepx-0.1.0+x86-64-v3\n"
           "verdict CERTIFIED\nisa x86-64-v3\ncpu GenuineIntel family 6 model 143 (Intel(R) Xeon(R))\n"
           "library libc.so.6 glibc-2.36\nlibrary libgomp.so.1 libgomp.so.1.0.0\n"
           "tolerance_table_sha256 %s\nrelaxed dx.exp f16 forward 4 ulp: a reason\n"
           "kernel dx.add 1 73730,73730,73730\n")
V2_KEY_ID = "24fd941bde7012637157685fc42a762ba802a7e2bbcb4b30badf5e2d980bc3bd"
V2_SIGNATURE = "NFwSKUbJ7FbLU1o+SvBUtl+39iorcyvjzisOilrJAgM357u8ZO1cyZ22eJb1y0SR+CZDhUs0Zg9kMJZ/QM6dAQ=="


# ---- fuzz_attrs_invoke -------------------------------------------------------------------------------

def op_index():
    text = open(os.path.join(ROOT, "abi", "include", "deepx", "ops.h")).read()
    names = re.findall(r'^\s*X\(\s*\w+\s*,\s*"([^"]+)"', text, re.M)
    return {n: k for k, n in enumerate(names)}


def ai_seeds():
    ops = op_index()
    I64, F64, BOOL, STRING, I64S, F64S, REPLACE = 1, 2, 3, 4, 5, 6, 0

    def attr(sel, typ, value):
        return bytes([sel, typ]) + value

    def named(name, typ, value):
        return bytes([0xE0, len(name)]) + name.encode() + bytes([typ]) + value

    arr = lambda *vs: bytes([len(vs)]) + ints(*vs)
    string = lambda s: bytes([len(s)]) + s.encode()

    def case(op, flags, attrs, inputs, outputs, second=None):
        out = bytes([ops[op], flags])
        if flags & 4:
            out += bytes([ops[second]])
        out += bytes([len(attrs)]) + b"".join(attrs)
        return out + b"".join(inputs) + b"".join(outputs)

    # input spec: U8 spec (bits 0-1: 0 = input 0's shape for inputs after the first, bits 2-3:
    # dtype source, 0x80: null), then rank and dims when it has its own shape
    def tin(dims, spec=1):
        return bytes([spec, len(dims)] + list(dims))

    same = bytes([0])  # an input with input 0's shape (for inputs after the first)
    out_same, out_scalar, out_reduced = bytes([0]), bytes([1]), bytes([3])

    def tout(dims):
        return bytes([2, len(dims)] + list(dims))

    return {
        "seed-sum-axes": case("dx.sum", 0, [attr(0, I64S, arr(0)), attr(1, BOOL, i(0))],
                              [tin([2, 3])], [out_reduced]),
        "seed-sum-axes-string": case("dx.sum", 0, [attr(0, STRING, string("0,1"))],
                                     [tin([2, 3])], [out_scalar]),
        "seed-sum-keepdims-f64": case("dx.sum", 0, [attr(1, F64, bytes([0]) + i(1))],
                                      [tin([2, 3])], [tout([1, 1])]),
        "seed-sum-axis-out-of-range": case("dx.mean", 0, [attr(0, I64S, arr(5, -9))],
                                           [tin([2, 3])], [out_scalar]),
        "seed-softmax-axis": case("dx.softmax", 0, [attr(0, I64, i(-1))], [tin([2, 3])],
                                  [out_same]),
        "seed-softmax-axis-huge": case("dx.softmax", 0, [attr(0, I64, i("INT64_MIN"))],
                                       [tin([2, 3])], [out_same]),
        "seed-softmax-axis-string": case("dx.log_softmax", 0, [attr(0, STRING, string("x"))],
                                         [tin([3])], [out_same]),
        "seed-transpose-perm": case("dx.transpose", 0, [attr(0, I64S, arr(1, 0))],
                                    [tin([2, 3])], [tout([3, 2])]),
        "seed-transpose-bad-perm": case("dx.transpose", 0, [attr(0, I64S, arr(0, 0))],
                                        [tin([2, 3])], [tout([3, 2])]),
        "seed-matmul": case("dx.matmul", 0, [attr(0, BOOL, i(1)), attr(1, I64, i(0))],
                            [tin([3, 2]), tin([3, 4])], [tout([2, 4])]),
        "seed-matmul-f64-flag": case("dx.matmul", 0, [attr(1, F64S, arr(1))],
                                     [tin([2, 2]), same], [out_same]),
        "seed-unknown-attr": case("dx.add", 0, [named("alpha", F64, bytes([0]) + i(2))],
                                  [tin([2]), same], [out_same]),
        "seed-replace-type": case("dx.sum", 4, [attr(0, I64S, arr(0)),
                                                attr(0, REPLACE, bytes([STRING - 1]) + string("a"))],
                                  [tin([4])], [out_scalar], second="dx.max"),
        "seed-add-backward": case("dx.add", 1, [], [tin([2, 2]), same, same, same],
                                  [out_same, bytes([0x80])]),
        "seed-argmax": case("dx.argmax", 0, [attr(0, I64, i(1)), attr(1, BOOL, i(1))],
                            [tin([2, 3])], [bytes([2 | 8, 2, 2, 1])]),
        "seed-clamp-strided": case("dx.clamp", 8, [attr(0, F64, bytes([0]) + i(-1)),
                                                   attr(1, I64, i(1))],
                                   [tin([2, 3], spec=1 | 0x40)], [out_same]),
        "seed-concat": case("dx.concat", 0, [attr(0, I64, i(0))], [bytes([1]), tin([2]), same],
                            [tout([4])]),
        "seed-gather-indices": case("dx.gather", 0, [attr(0, I64, i(0))],
                                    [tin([3]), tin([2], spec=1 | 8)], [tout([2])]),
        "seed-fill": case("dx.fill", 0, [attr(0, F64, bytes([1]))], [], [tout([2, 2])]),
        "seed-cast-dtype-string": case("dx.cast", 0, [attr(0, STRING, string("f16"))],
                                       [tin([3])], [bytes([0 | 12, 2])]),
    }


def write(target, seeds):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.startswith("seed-"):
            os.remove(os.path.join(directory, name))
    for name, data in seeds.items():
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def main():
    write("tensor_view", tv_seeds())
    write("dlpack_import", dl_seeds())
    write("safetensors_load", st_seeds())
    write("certificate", cert_seeds())
    write("attrs_invoke", ai_seeds())


if __name__ == "__main__":
    main()
