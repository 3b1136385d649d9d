"""Reads the arrays of a vmoe checkpoint (google-research/vmoe's format).

google-research/vmoe stores parameters as `<prefix>.index` plus
`<prefix>.data-NNNNN-of-MMMMM` files, each one MessagePack document
(`vmoe/checkpoints/partitioned.py`, `serialization.py`):

- the index is `{"shard_count": N, "index": <nested dict of the param
  tree, leaves = IndexInfo>, "version": "20220622"}` (`version` is absent
  in checkpoints written before 2022-06-22; both read the same);
- an `IndexInfo` (extension type 8) holds the global shape and dtype, the
  slices of the chunks the array was cut into, and which data file holds
  each chunk;
- a data file is `{"__msgpack_array_chunk_a87ca2__": True, "<leaf id>":
  [[[ndarray pieces...], slice_nd], ...], ...}`, where leaf `i` is the
  i-th leaf of the index tree in sorted-key depth-first order and each
  chunk's pieces are its flattened (C order) values.

`read_vmoe_checkpoint` reassembles every array from its chunks and checks
that the chunks cover it exactly.
"""

import glob
import math
import os

import numpy as np

from ensemble_zoo.utils.msgpack_decode import MsgpackError
from ensemble_zoo.utils.msgpack_decode import unpackb

CHUNK_MAGIC = "__msgpack_array_chunk_a87ca2__"
KNOWN_VERSIONS = (None, "20220622")
_NDARRAY, _NPSCALAR, _SHAPED_ARRAY, _SLICE_ND, _INDEX_INFO = 1, 3, 4, 6, 8


class VMoECheckpointError(ValueError):
    """A vmoe checkpoint file is missing pieces or is not in vmoe's format."""


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _ndarray(payload):
    shape, dtype, data = unpackb(payload)
    dtype = _text(dtype)
    if dtype == "bfloat16":  # widen exactly, without ml_dtypes
        bits = np.frombuffer(data, "<u2").astype(np.uint32) << 16
        array = bits.view(np.float32)
    else:
        array = np.frombuffer(data, np.dtype(dtype).newbyteorder("<"))
    return array.reshape(shape)


def _slice_nd(payload):
    slices = []
    for item in unpackb(payload):
        start, stop, step = unpackb(item)
        if step not in (None, 1):
            raise VMoECheckpointError(f"strided chunk slices are not supported (step {step})")
        slices.append((start, stop))
    return tuple(slices)


def _index_info(payload):
    global_shape, global_slices, shards = unpackb(payload)
    shape, dtype = unpackb(global_shape)[:2]
    return {
        "shape": tuple(shape),
        "dtype": _text(dtype),
        "slices": [_slice_nd(s) for s in global_slices],
        "shards": list(shards),
    }


def checkpoint_prefix(path):
    """The `<prefix>` of a checkpoint given as the prefix itself, its
    `.index` file or a directory holding exactly one `.index` file."""
    path = os.fspath(path)
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.index")))
        if len(found) != 1:
            raise FileNotFoundError(
                f"`path` {path!r} is a directory with {len(found)} `.index` "
                "files; pass the checkpoint prefix (the path before `.index`) "
                f"or a directory with exactly one. Found: {found}"
            )
        path = found[0]
    if path.endswith(".index"):
        path = path[: -len(".index")]
    if not os.path.isfile(path + ".index"):
        raise FileNotFoundError(
            f"No vmoe checkpoint index {path + '.index'!r}: `path` must be a "
            "checkpoint prefix (e.g. 'vmoe_s32_last2_ilsvrc2012' for "
            "'vmoe_s32_last2_ilsvrc2012.index' and its '.data-00000-of-00001'), "
            "its `.index` file, or a directory holding one."
        )
    return path


def _decode_file(filename):
    with open(filename, "rb") as f:
        data = f.read()
    try:
        return unpackb(data)
    except (MsgpackError, ValueError, TypeError) as error:
        raise VMoECheckpointError(
            f"{filename!r} is not a vmoe checkpoint file (MessagePack): {error}"
        ) from error


def _leaves(tree, path=()):
    """`(path, IndexInfo)` in sorted-key depth-first order (jax's flatten
    order of a dict, which gives the leaf ids)."""
    if isinstance(tree, dict):
        for key in sorted(tree):
            yield from _leaves(tree[key], path + (key,))
    else:
        yield "/".join(path), tree


def read_vmoe_checkpoint(path):
    """Reads a vmoe checkpoint into a flat dict of NumPy arrays.

    Args:
        path: the checkpoint prefix (`.../vmoe_b16_imagenet21k_randaug_strong`
            for `....index` and `....data-00000-of-00001`), its `.index`
            file, or a directory holding exactly one `.index` file.

    Returns:
        `{"Encoder/encoderblock_1/Moe/Mlp/Dense_0/kernel": array, ...}`, keys
        joined with `/` as vmoe's `flatten_dict(sep="/")`. bfloat16 arrays
        are widened to float32 (exactly); other dtypes are kept.

    Raises:
        FileNotFoundError: the index or a data file it names is missing.
        VMoECheckpointError: (a `ValueError`) a file is not in vmoe's format,
            an unknown version, or chunks that do not cover an array
            exactly; the message names the file and parameter.
    """
    prefix = checkpoint_prefix(path)
    index_file = prefix + ".index"
    index = _decode_file(index_file)
    if not isinstance(index, dict) or not {"index", "shard_count"} <= set(index):
        keys = sorted(index) if isinstance(index, dict) else type(index).__name__
        raise VMoECheckpointError(
            f"{index_file!r} is not a vmoe checkpoint index: expected a map "
            f"with 'shard_count' and 'index'; got {keys}."
        )
    version = index.get("version")
    if version not in KNOWN_VERSIONS:
        raise VMoECheckpointError(
            f"{index_file!r} has checkpoint version {version!r}; this reader "
            f"knows {KNOWN_VERSIONS[1:]} and unversioned (2022) checkpoints."
        )
    leaves = []
    for name, info in _leaves(index["index"]):
        if not (hasattr(info, "code") and info.code == _INDEX_INFO):
            raise VMoECheckpointError(
                f"{index_file!r}: entry {name!r} is not an IndexInfo "
                f"(MessagePack extension {_INDEX_INFO})."
            )
        leaves.append((name, _index_info(info.data)))
    shard_count = index["shard_count"]
    arrays, filled = {}, {}
    for name, info in leaves:
        dtype = np.float32 if info["dtype"] == "bfloat16" else np.dtype(info["dtype"])
        arrays[name] = np.zeros(info["shape"], dtype)
        filled[name] = np.zeros(info["shape"], bool)
    needed = sorted({s for _, info in leaves for s in info["shards"]})
    for shard in needed:
        filename = f"{prefix}.data-{shard:05d}-of-{shard_count:05d}"
        if not os.path.isfile(filename):
            raise FileNotFoundError(
                f"vmoe checkpoint data file {filename!r} is missing ({index_file!r} "
                f"lists {shard_count} data files)."
            )
        _read_shard(filename, leaves, arrays, filled)
    for name, mask in filled.items():
        if not mask.all():
            raise VMoECheckpointError(
                f"vmoe checkpoint {prefix!r}: parameter {name!r} "
                f"{tuple(mask.shape)} has {int(mask.size - mask.sum())} of "
                f"{mask.size} values in no chunk of the data files."
            )
    return arrays


def _read_shard(filename, leaves, arrays, filled):
    document = _decode_file(filename)
    if not isinstance(document, dict) or document.get(CHUNK_MAGIC) is not True:
        raise VMoECheckpointError(
            f"{filename!r} is not a vmoe checkpoint data file (no {CHUNK_MAGIC!r} marker)."
        )
    for key, chunks in document.items():
        if key == CHUNK_MAGIC:
            continue
        if not (isinstance(key, str) and key.isdigit() and int(key) < len(leaves)):
            raise VMoECheckpointError(
                f"{filename!r} holds chunks of leaf {key!r}; the index has {len(leaves)} leaves."
            )
        name = leaves[int(key)][0]
        target, mask = arrays[name], filled[name]
        for pieces, where in chunks:
            bounds = _slice_nd(where.data)
            if len(bounds) != target.ndim or any(
                not 0 <= a <= b <= n for (a, b), n in zip(bounds, target.shape)
            ):
                raise VMoECheckpointError(
                    f"{filename!r}: a chunk of {name!r} has slice {bounds}, "
                    f"outside the array's shape {target.shape}."
                )
            shape = tuple(b - a for a, b in bounds)
            values = [_ndarray(p.data).ravel() for p in pieces]
            values = np.concatenate(values) if values else np.zeros(0)
            if values.size != math.prod(shape):
                raise VMoECheckpointError(
                    f"{filename!r}: a chunk of {name!r} at {bounds} holds "
                    f"{values.size} values; its slice needs {math.prod(shape)}."
                )
            region = tuple(slice(a, b) for a, b in bounds)
            target[region] = values.reshape(shape)
            mask[region] = True


# ------------------------------------------------------------- architecture
