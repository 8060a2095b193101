# Helpers for the collective suites' Python one-liners: make inputs, read
# results (.npy, .safetensors, streams of .npy) and compare them with
# expectations computed here, independently of collx, with NumPy.
import io
import json
import struct
import sys

import numpy as np

ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
             "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
ST_NAMES = {np.dtype(v).str: k for k, v in ST_DTYPES.items()}


def save(path, a):
    np.save(path, np.ascontiguousarray(a), allow_pickle=False)


class BF16:
    """An array to be stored as bfloat16 (its float32 values truncated)."""
    def __init__(self, a):
        self.a = np.ascontiguousarray(a, dtype="<f4")


def save_st(path, tensors, meta=None):
    """Write a .safetensors file from a dict name -> array (or BF16)."""
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = dict(meta)
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, BF16):
            dt, shape, b = "BF16", t.a.shape, (t.a.view("<u4") >> 16).astype("<u2").tobytes()
        else:
            a = np.ascontiguousarray(t)
            dt, shape, b = ST_NAMES[a.dtype.str], a.shape, a.tobytes()
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_st(path):
    """(dict name -> array, metadata dict) of a .safetensors file."""
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = buf[8 + n:]
    out = {}
    for name, d in header.items():
        lo, hi = d["data_offsets"]
        if d["dtype"] == "BF16":    # as float32, with a "bf16" marker name
            u = np.frombuffer(data[lo:hi], dtype="<u2").astype("<u4") << 16
            out[name] = u.view("<f4").reshape(d["shape"])
            out.setdefault("__bf16__", []).append(name)
            continue
        out[name] = np.frombuffer(data[lo:hi], dtype=ST_DTYPES[d["dtype"]]).reshape(d["shape"])
    return out, meta


def load(path):
    return np.load(path, allow_pickle=False)


def load_stream(path):
    """Every array of a file holding .npy images one after another."""
    out = []
    with open(path, "rb") as f:
        while f.peek(1) if hasattr(f, "peek") else f.read(0):
            out.append(np.lib.format.read_array(f, allow_pickle=False))
    return out


def npy_bytes(a):
    """The .npy image of a, for writing to pipes (numpy's writer seeks)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def write_stream(path, arrays):
    with open(path, "wb") as f:
        for a in arrays:
            f.write(npy_bytes(a))


def same(got, want, what="result"):
    """Exactly equal: dtype, shape and every element."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        sys.exit(f"{what}: got {got.dtype} {got.shape}\n{got}\nwant {want.dtype} {want.shape}\n{want}")


def close(got, want, rtol=1e-6, atol=1e-6, what="result"):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.allclose(got.astype("f8"), want.astype("f8"),
                                                  rtol=rtol, atol=atol):
        sys.exit(f"{what}: got {got.shape}\n{got}\nwant {want.shape}\n{want}")
