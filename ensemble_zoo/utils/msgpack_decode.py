"""A small, dependency-free MessagePack decoder.

Enough of https://github.com/msgpack/msgpack/blob/master/spec.md to read
Flax / vmoe checkpoints: every type of the spec, with extension values
returned as `ExtType(code, data)` for the caller to interpret. Used by
`ensemble_zoo.models.vit_moe.vmoe_checkpoint`; the zoo does not depend on
the `msgpack` package.
"""

import collections
import struct

ExtType = collections.namedtuple("ExtType", ["code", "data"])


class MsgpackError(ValueError):
    """The bytes are not one well-formed MessagePack document."""


_FIXED = {0xC0: None, 0xC2: False, 0xC3: True}
# Marker -> (struct format of the length / value, kind).
_SIZED = {
    0xC4: (">B", "bin"),
    0xC5: (">H", "bin"),
    0xC6: (">I", "bin"),
    0xC7: (">B", "ext"),
    0xC8: (">H", "ext"),
    0xC9: (">I", "ext"),
    0xD9: (">B", "str"),
    0xDA: (">H", "str"),
    0xDB: (">I", "str"),
    0xDC: (">H", "array"),
    0xDD: (">I", "array"),
    0xDE: (">H", "map"),
    0xDF: (">I", "map"),
}
_NUMBERS = {
    0xCA: ">f",
    0xCB: ">d",
    0xCC: ">B",
    0xCD: ">H",
    0xCE: ">I",
    0xCF: ">Q",
    0xD0: ">b",
    0xD1: ">h",
    0xD2: ">i",
    0xD3: ">q",
}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


class _Reader:
    def __init__(self, data):
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n):
        end = self.pos + n
        if end > len(self.data):
            raise MsgpackError(
                f"truncated: needs {n} bytes at offset {self.pos}, the "
                f"document has {len(self.data)}"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def value(self, depth=0):
        if depth > 512:
            raise MsgpackError("nested deeper than 512 levels")
        marker = self.take(1)[0]
        if marker <= 0x7F:
            return marker
        if marker >= 0xE0:
            return marker - 0x100
        if 0x80 <= marker <= 0x8F:
            return self.map(marker & 0x0F, depth)
        if 0x90 <= marker <= 0x9F:
            return [self.value(depth + 1) for _ in range(marker & 0x0F)]
        if 0xA0 <= marker <= 0xBF:
            return self.string(marker & 0x1F)
        if marker in _FIXED:
            return _FIXED[marker]
        if marker in _NUMBERS:
            return self.unpack(_NUMBERS[marker])
        if marker in _FIXEXT:
            code = self.unpack(">b")
            return ExtType(code, bytes(self.take(_FIXEXT[marker])))
        if marker in _SIZED:
            fmt, kind = _SIZED[marker]
            n = self.unpack(fmt)
            if kind == "bin":
                return bytes(self.take(n))
            if kind == "str":
                return self.string(n)
            if kind == "ext":
                code = self.unpack(">b")
                return ExtType(code, bytes(self.take(n)))
            if kind == "array":
                return [self.value(depth + 1) for _ in range(n)]
            return self.map(n, depth)
        raise MsgpackError(f"invalid marker byte 0x{marker:02x} at offset {self.pos - 1}")

    def string(self, n):
        raw = self.take(n)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise MsgpackError(f"invalid UTF-8 string at offset {self.pos - n}") from error

    def map(self, n, depth):
        out = {}
        for _ in range(n):
            key = self.value(depth + 1)
            if isinstance(key, list):
                key = tuple(key)
            out[key] = self.value(depth + 1)
        return out


def unpackb(data):
    """Decodes one MessagePack document.

    Maps become dicts (in file order), arrays lists, str `str`, bin
    `bytes`, and extension values `ExtType(code, data)`.

    Args:
        data: bytes-like, exactly one document.

    Returns:
        The decoded value.

    Raises:
        MsgpackError: (a `ValueError`) on truncated or malformed bytes or
            trailing data.

    Example:

    ```python
    from ensemble_zoo.utils.msgpack_decode import unpackb

    unpackb(b"\\x82\\xa1a\\x01\\xa1b\\x92\\xc3\\xc0")  # {'a': 1, 'b': [True, None]}
    ```
    """
    reader = _Reader(data)
    value = reader.value()
    if reader.pos != len(reader.data):
        raise MsgpackError(
            f"{len(reader.data) - reader.pos} trailing bytes after the "
            f"document (offset {reader.pos})"
        )
    return value
