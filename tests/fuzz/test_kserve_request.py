"""KServe request decoding over hostile requests (datatypes valid and not, shapes with negative,
zero and huge dims, raw contents of any length, typed contents in any field, tensor
parameters, duplicate names) and hostile bytes: the supervisor's bounded header reading
(rtd/infer_request.py `scan` + `declared_inputs`) and the worker's decoding
(daemon/worker/kserve_codec.py `decode_grpc`), both from the serialized request.

Properties: decoding gives {name: array} in the inputs' order, each with the request's shape
and the datatype's dtype and exactly the bytes or values sent, or raises
RtdError(E_REQUEST_INVALID); the header reading never disagrees with protobuf's own parser
on a message both accept, and never lets anything but an RtdError escape.
"""
import asyncio
import functools
import json
import tracemalloc

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import strategies as st

from rtd import dtypes
from rtd.daemon.worker.kserve_codec import Caps, decode_grpc, decode_rest
from rtd.infer_request import declared_inputs, scan
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb

from . import h2peer
from .frames import bounded_address_space
from .harness import assert_refusal, assert_refused, edit_bytes, note, run

INT64 = (-(2**63), 2**63 - 1)
TYPED = {"bool_contents": st.booleans(), "int_contents": st.integers(-(2**31), 2**31 - 1),
         "int64_contents": st.integers(*INT64), "uint_contents": st.integers(0, 2**32 - 1),
         "uint64_contents": st.integers(0, 2**64 - 1), "fp32_contents": st.floats(width=32),
         "fp64_contents": st.floats(), "bytes_contents": st.binary(max_size=8)}
datatypes = st.one_of(st.sampled_from(sorted(dtypes.BY_KSERVE)), st.sampled_from(["", "BF16", "FP8", "fp32", "INT128", "BYTES\0"]),
                      st.text(max_size=6))
shapes = st.one_of(st.lists(st.integers(0, 4), max_size=4), st.lists(st.integers(*INT64), max_size=20),
                   st.lists(st.sampled_from([0, 1, 2, -1, 2**20, 2**31, 2**32, 2**62, 2**63 - 1]), max_size=5))


def _count(shape) -> int:
    return int(np.prod([float(d) for d in shape])) if shape else 1


@st.composite
def raw_contents(draw, datatype: str, shape: list) -> bytes:
    """Mostly bytes that fit the shape, sometimes any bytes."""
    row, count = dtypes.BY_KSERVE.get(datatype), _count(shape)
    if row is None or min(shape, default=0) < 0 or count > 64 or draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=64))
    if row.wire == "bytes":
        items = draw(st.lists(st.binary(max_size=6), min_size=count, max_size=count))
        return b"".join(len(i).to_bytes(4, "little") + i for i in items)
    return draw(st.binary(min_size=count * row.itemsize, max_size=count * row.itemsize))


@st.composite
def requests(draw) -> tuple[pb.ModelInferRequest, int]:
    request = pb.ModelInferRequest(model_name=draw(st.sampled_from(["m", "", "../x"])), id=draw(st.text(max_size=4)))
    mode = draw(st.sampled_from(["raw", "raw", "typed", "typed", "none", "mixed"]))
    for _ in range(draw(st.integers(0, 3))):
        datatype, shape = draw(datatypes), draw(shapes)
        if draw(st.integers(0, 2)) == 0:   # mostly a small, sane shape
            shape = draw(st.lists(st.integers(0, 4), max_size=3))
        tensor = request.inputs.add(name=draw(st.sampled_from(["x", "y", "z", "x"])), datatype=datatype, shape=shape)
        if draw(st.integers(0, 15)) == 0:
            tensor.parameters["shared_memory_region"].string_param = "r"
        if mode in ("raw", "mixed"):
            request.raw_input_contents.append(draw(raw_contents(datatype, shape)))
        if mode in ("typed", "mixed"):
            row = dtypes.BY_KSERVE.get(datatype)
            count = _count(shape)
            if row is not None and row.typed_field and 0 <= count <= 64 and min(shape, default=0) >= 0 and draw(st.booleans()):
                getattr(tensor.contents, row.typed_field).extend(
                    draw(st.lists(TYPED[row.typed_field], min_size=count, max_size=count)))
            else:
                field = draw(st.sampled_from(sorted(TYPED)))
                getattr(tensor.contents, field).extend(draw(st.lists(TYPED[field], max_size=6)))
    if mode == "raw" and draw(st.integers(0, 5)) == 0:
        request.raw_input_contents.append(draw(st.binary(max_size=8)))   # one too many
    if draw(st.booleans()):
        request.parameters["timeout"].int64_param = draw(st.integers(*INT64))
    return request, draw(st.sampled_from([64, 4096, 1 << 20]))


def decode_request(request: pb.ModelInferRequest, max_bytes: int) -> dict:
    return decode_grpc(request.SerializeToString(), Caps(max_bytes)).inputs


def check_decoded(request: pb.ModelInferRequest, max_bytes: int) -> None:
    try:
        with bounded_address_space():
            out = decode_request(request, max_bytes)
    except Exception as e:   # the property is about what may escape
        assert_refusal(e, Code.E_REQUEST_INVALID)
        note(e.code.name)
        return
    note(f"decoded {len(out)} inputs")
    assert list(out) == [t.name for t in request.inputs]
    raw = list(request.raw_input_contents)
    for i, tensor in enumerate(request.inputs):
        a, row = out[tensor.name], dtypes.BY_KSERVE[tensor.datatype]
        assert a.shape == tuple(tensor.shape) and a.dtype == row.numpy
        if raw:
            assert (dtypes.encode_bytes(a) if row.wire == "bytes" else a.tobytes()) == raw[i]
            assert len(raw[i]) <= max_bytes or row.wire == "bytes"
        else:
            sent = list(getattr(tensor.contents, row.typed_field)) if row.typed_field else []
            expected = np.array(sent, dtype=row.numpy) if row.wire != "bytes" else sent
            got = a.reshape(-1)
            if row.wire == "bytes":
                assert list(got) == expected
            else:
                np.testing.assert_array_equal(got, expected)


def test_decode_request_refuses_with_e_request_invalid():
    run(requests(), lambda case: check_decoded(*case), default=400)


@st.composite
def message_bytes(draw) -> bytes:
    """Random bytes, or a real request's serialization cut, spliced or with bits flipped."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.binary(max_size=256))
    data = bytearray(draw(requests())[0].SerializeToString())
    for _ in range(draw(st.integers(0, 3))):
        edit_bytes(draw, data, draw(st.sampled_from(["flip", "cut", "insert"])))
    return bytes(data)


def check_message(case) -> None:
    """The header reading on any bytes: a refusal, or what protobuf itself reads there."""
    data, max_bytes = case
    try:
        head = scan(data)
        declared = declared_inputs(head, max_bytes)
    except Exception as e:
        assert_refusal(e, Code.E_REQUEST_INVALID)
        note(f"refused: {e.detail[:40]}")
        return
    try:
        request = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        raise AssertionError("the header reading accepted what protobuf cannot parse") from None
    assert (head.model_name, head.model_version, head.id) == (request.model_name, request.model_version, request.id)
    assert [(t.name, t.datatype, t.shape) for t in head.inputs] == [(t.name, t.datatype, tuple(t.shape)) for t in request.inputs]
    assert [o.name for o in head.outputs] == [o.name for o in request.outputs]
    assert [bytes(memoryview(data)[a:b]) for a, b in head.raw] == list(request.raw_input_contents)
    assert list(declared) == [t.name for t in request.inputs]
    check_decoded(request, max_bytes)


def test_message_parse_then_decode():
    run(st.tuples(message_bytes(), st.sampled_from([64, 4096, 1 << 20])), check_message, default=400)


# -- regressions: bugs the fuzzer found ------------------------------------------------------------
def _request(datatype: str, shape: list, raw: bytes | None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype=datatype, shape=shape)
    if raw is not None:
        request.raw_input_contents.append(raw)
    return request


def test_a_field_key_longer_than_32_bits_is_refused_as_protobuf_refuses_it():
    """A key padded to six bytes (a5 80 80 80 81 00: its last byte a needless zero) and a five-byte key past 32
    bits: protobuf refuses both, so the header reading refuses them too; a five-byte key within 32 bits is read."""
    for data in (b"\xa9\x80\x80\x80\x81\x00" + bytes(8) + b"\n\x01m", b"\xf8\xff\xff\xff\x1f\x00"):
        with pytest.raises(DecodeError):
            pb.ModelInferRequest.FromString(data)
        check_message((data, 64))   # a refusal, E_REQUEST_INVALID
        with pytest.raises(RtdError):
            scan(data)
    check_message((b"\xf8\xff\xff\xff\x0f\x00", 64))   # field 536870911, the largest: read, as protobuf does


def test_an_empty_input_with_overflowing_dims_is_e_request_invalid():
    """Was: daemon/tensors.py `_shape` let shape [0, 2^32, 2^32] through (0 elements), then
    `_decode_raw` / `_decode_typed`'s `.reshape(shape)` raised ValueError ("array is too
    big"): E_INTERNAL through the gRPC front, not INVALID_ARGUMENT."""
    for raw in (b"", None):
        assert_refused(f"an input of shape [0, 2^32, 2^32] (raw contents {raw!r})",
                       functools.partial(decode_request, _request("FP32", [0, 2**32, 2**32], raw), 1 << 20), Code.E_REQUEST_INVALID)


def test_a_bytes_input_count_is_checked_against_its_bytes_before_allocating():
    """Was: rtd/dtypes.py `decode_bytes` (from daemon/tensors.py `_decode_raw`) filled
    np.empty(count, object) before looking at the bytes: a ~20-byte message naming BYTES shape
    [2^22] with no contents cost 32 MiB (2 GiB and ~6 s of the event loop at 2^28)."""
    request = _request("BYTES", [1 << 22], b"")
    tracemalloc.start()
    try:
        assert_refused("BYTES shape [2^22] with no contents", lambda: decode_request(request, 256 << 20), Code.E_REQUEST_INVALID)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = request.ByteSize()
    assert peak < 1 << 20, f"decoding a {size}-byte request allocated {peak} bytes"


def test_an_undecodable_message_is_invalid_argument_e_request_invalid():
    """Was: daemon/grpc_front.py `model_infer` (and every handler that parses a message) let
    protobuf's DecodeError reach daemon/http2.py `_run`: INTERNAL "E_INTERNAL" and a traceback
    for a client's malformed message."""
    sid, raised, answers, _ = asyncio.run(h2peer.exchange(lambda c: h2peer.unary(c, "ModelInfer", b"\xff\xff\xff")))
    assert raised is None, f"{type(raised).__name__} escaped data_received: {raised}"
    status, message = answers[sid]
    assert (status, message.split(":")[0]) == ("3", "E_REQUEST_INVALID"), f"grpc-status {status}: {message}"


# -- REST bodies: the worker's decoding of the JSON inference header and the binary part ------------
json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                                     st.text(max_size=4)),
                           lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=12)


@st.composite
def rest_bodies(draw) -> tuple[bytes, int | None, int]:
    """A REST inference body (JSON header, binary part), sane or edited, and its header length."""
    inputs = []
    binary = b""
    for _ in range(draw(st.integers(0, 3))):
        datatype = draw(datatypes)
        shape = draw(st.lists(st.integers(0, 4), max_size=3)) if draw(st.booleans()) else draw(shapes)
        tensor = {"name": draw(st.sampled_from(["x", "y", "x"])), "datatype": datatype, "shape": shape}
        if draw(st.booleans()):
            raw = draw(raw_contents(datatype, shape))
            tensor["parameters"] = {"binary_data_size": draw(st.sampled_from([len(raw), len(raw) + 1, -1, 2**40]))}
            binary += raw
        else:
            tensor["data"] = draw(st.lists(json_values, max_size=8))
        if draw(st.integers(0, 10)) == 0:
            tensor[draw(st.text(max_size=5))] = draw(json_values)
        inputs.append(tensor)
    doc = {"inputs": inputs}
    if draw(st.booleans()):
        doc["outputs"] = draw(st.lists(st.fixed_dictionaries({"name": st.text(max_size=3)}, optional={
            "parameters": st.dictionaries(st.sampled_from(["binary_data", "classification"]), json_values, max_size=2)}), max_size=2))
    if draw(st.booleans()):
        doc["parameters"] = draw(st.dictionaries(st.sampled_from(["timeout", "binary_data_output", "rtd_profile", "x"]),
                                                 json_values, max_size=3))
    header = bytearray(json.dumps(doc).encode())
    for _ in range(draw(st.integers(0, 2))):
        edit_bytes(draw, header, draw(st.sampled_from(["flip", "cut", "insert"])))
    split = draw(st.sampled_from([len(header), None, 0, len(header) + 1]))
    return bytes(header) + binary, (None if split is None and binary else split), draw(st.sampled_from([64, 4096, 1 << 20]))


def check_rest(case) -> None:
    body, split, max_bytes = case
    try:
        with bounded_address_space():
            request = decode_rest(body, split, Caps(max_bytes, max_elements=1 << 12))
    except Exception as e:
        assert_refusal(e, Code.E_REQUEST_INVALID, Code.E_MESSAGE_TOO_LARGE)
        note(e.code.name)
        return
    note(f"decoded {len(request.inputs)} inputs")
    for name, array in request.inputs.items():
        assert isinstance(name, str) and isinstance(array, np.ndarray)


def test_rest_bodies_decode_or_are_refused_with_an_e_code():
    run(rest_bodies(), check_rest, default=150)
