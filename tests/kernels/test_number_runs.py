"""Long INTS/FLOATS attributes decoded from their encoding (kernels/number_runs.py) hold exactly what
the protobuf runtime reads, whatever the values, and a layout it does not expect falls back."""
import array

import numpy as np
import onnx
import pytest
from onnx import helper

from rtd.kernels import ir, number_runs

INT_EDGES = [0, 1, 127, 128, 16383, 16384, -1, -128, 2**31 - 1, -2**31, 2**62, 2**63 - 1, -2**63]


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def decoder(request, monkeypatch):
    """Every test with the C pass (native/varint.c) and with the NumPy passes it stands in for."""
    if request.param == "numpy":
        monkeypatch.setattr(number_runs, "compiled", None)
    elif number_runs.compiled is None:
        pytest.skip("rtd was installed without its compiled kernels")
    return request.param


def _attribute(name: str, values) -> onnx.AttributeProto:
    return helper.make_attribute(name, values)


@pytest.mark.parametrize("seed", range(3))
def test_ints_of_every_width_match_the_runtime(seed):
    rng = np.random.default_rng(seed)
    widths = rng.integers(0, 64, size=20000)
    values = (rng.integers(0, 2**62, size=20000) >> (62 - widths).clip(0)) * rng.choice([-1, 1], size=20000)
    values = np.concatenate([values, INT_EDGES]).tolist()
    attr = _attribute("nodes_nodeids", values)
    got = ir.attribute_value(attr, {}, {})
    assert isinstance(got, array.array) and got.typecode == "q"
    assert got.tolist() == list(attr.ints)


def test_floats_match_the_runtime_bit_for_bit():
    values = np.random.default_rng(4).standard_normal(10000).astype(np.float32)
    values[:4] = [np.inf, -np.inf, np.nan, -0.0]
    attr = _attribute("nodes_values", values.tolist())
    got = ir.attribute_value(attr, {}, {})
    assert got.typecode == "f"
    assert np.frombuffer(got, np.float32).tobytes() == array.array("f", attr.floats).tobytes()


def test_one_byte_values_take_the_short_path():
    attr = _attribute("nodes_featureids", [i % 40 for i in range(9000)])
    assert ir.attribute_value(attr, {}, {}).tolist() == list(attr.ints)


def test_fields_before_the_run_are_stepped_over():
    attr = _attribute("class_ids", list(range(5000)))
    attr.i, attr.f, attr.s = 7, 2.5, b"ignored"   # fields 2, 3 and 4 come before ints (8)
    assert number_runs.run(attr.SerializeToString(), 8, len(attr.ints), np.int64).tolist() == list(attr.ints)


def test_a_packed_run_is_left_to_the_runtime():
    """proto2 writes unpacked runs; a packed one (allowed on the wire) is not the layout decoded here."""
    values = list(range(300, 6000))
    body = b"".join(_varint(v) for v in values)
    encoded = b"\x0a\x03ids" + b"\x42" + _varint(len(body)) + body + b"\xa0\x01" + _varint(onnx.AttributeProto.INTS)
    assert number_runs.run(encoded, 8, len(values), np.int64) is None
    parsed = onnx.AttributeProto.FromString(encoded)
    assert ir.attribute_value(parsed, {}, {}).tolist() == values


def test_a_run_split_by_another_field_is_left_to_the_runtime():
    first, second = list(range(5000)), list(range(5000, 5100))
    encoded = _unpacked(first) + b"\x0a\x03ids" + _unpacked(second)
    assert number_runs.run(encoded, 8, len(first) + len(second), np.int64) is None


def _unpacked(values) -> bytes:
    return b"".join(b"\x40" + _varint(v) for v in values)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def test_a_truncated_run_is_left_to_the_runtime_and_the_c_pass_checks_its_arguments(decoder):
    encoded = _unpacked(list(range(200, 2000)))
    assert number_runs.run(encoded[:-1], 8, 1800, np.int64) is None   # the last varint cut short
    assert number_runs.run(encoded + b"\x40\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 8, 1801, np.int64) is None  # 11 bytes
    if decoder == "compiled":
        ffi, lib = number_runs.compiled.ffi, number_runs.compiled.lib
        out = np.empty(4, np.int64)
        data = ffi.from_buffer("uint8_t[]", encoded)
        for key, count, out_len in ((0, 4, 4), (128, 4, 4), (0x40, 4, 3), (0x40, -1, -1)):
            assert lib.rtd_varint_run(data, len(encoded), key, count, ffi.from_buffer("int64_t[]", out), out_len) == -1
