"""The MessagePack decoder against byte strings written from the spec
(https://github.com/msgpack/msgpack/blob/master/spec.md), one per type."""

import struct

import pytest

from ensemble_zoo.utils.msgpack_decode import ExtType
from ensemble_zoo.utils.msgpack_decode import MsgpackError
from ensemble_zoo.utils.msgpack_decode import unpackb

CASES = [
    (b"\x00", 0),
    (b"\x7f", 127),
    (b"\xff", -1),
    (b"\xe0", -32),
    (b"\xc0", None),
    (b"\xc2", False),
    (b"\xc3", True),
    (b"\xcc\xff", 255),
    (b"\xcd\x01\x00", 256),
    (b"\xce\x00\x01\x00\x00", 65536),
    (b"\xcf" + (2**40).to_bytes(8, "big"), 2**40),
    (b"\xd0\x80", -128),
    (b"\xd1\x80\x00", -32768),
    (b"\xd2\xff\xff\xff\xfe", -2),
    (b"\xd3" + (-(2**40)).to_bytes(8, "big", signed=True), -(2**40)),
    (b"\xca" + struct.pack(">f", 0.5), 0.5),
    (b"\xcb" + struct.pack(">d", -1.25), -1.25),
    (b"\xa3abc", "abc"),
    (b"\xd9\x02\xc3\xa9", "\u00e9"),
    (b"\xda\x00\x01x", "x"),
    (b"\xdb\x00\x00\x00\x01y", "y"),
    (b"\xc4\x02\x00\x01", b"\x00\x01"),
    (b"\xc5\x00\x01z", b"z"),
    (b"\xc6\x00\x00\x00\x00", b""),
    (b"\x92\x01\xa1a", [1, "a"]),
    (b"\xdc\x00\x01\xc0", [None]),
    (b"\xdd\x00\x00\x00\x00", []),
    (b"\x81\xa1k\x90", {"k": []}),
    (b"\xde\x00\x01\x01\x02", {1: 2}),
    (b"\xdf\x00\x00\x00\x01\xa1a\x81\xa1b\xc3", {"a": {"b": True}}),
    (b"\xd4\x01\x07", ExtType(1, b"\x07")),
    (b"\xd8\x08" + bytes(16), ExtType(8, bytes(16))),
    (b"\xc7\x03\x06abc", ExtType(6, b"abc")),
    (b"\xc8\x00\x01\xff!", ExtType(-1, b"!")),
    (b"\xc9\x00\x00\x00\x00\x01", ExtType(1, b"")),
]


@pytest.mark.parametrize("data,expected", CASES, ids=[c[0][:1].hex() for c in CASES])
def test_every_type_decodes_as_the_spec_says(data, expected):
    value = unpackb(data)
    assert value == expected and type(value) is type(expected)


def test_malformed_bytes_are_clear_errors():
    with pytest.raises(MsgpackError, match="truncated"):
        unpackb(b"\xa5ab")
    with pytest.raises(MsgpackError, match="trailing"):
        unpackb(b"\x01\x02")
    with pytest.raises(MsgpackError, match="invalid marker byte 0xc1"):
        unpackb(b"\xc1")
    with pytest.raises(MsgpackError, match="UTF-8"):
        unpackb(b"\xa1\xff")
    assert issubclass(MsgpackError, ValueError)
