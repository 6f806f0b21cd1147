"""Talking to a real worker over its channel as the scheduler does: a request built by the
client's own encoder, passed in an INFER frame, the answer read by the scheduler's parser and
decoded by the client's decoder."""
import math

from rtd import wire
from rtd.daemon.serving.scheduler import InferRequest, infer_frame, parse_answer
from rtd.proto import grpc_service_pb2 as pb
from rtd.tensors import decode_response, encode_inputs

MAX_BYTES = 1 << 30


def grpc_body(model: str, arrays: dict, outputs=()) -> bytes:
    tensors, raw = encode_inputs(arrays)
    request = pb.ModelInferRequest(model_name=model, inputs=tensors, raw_input_contents=raw)
    for name in outputs:
        request.outputs.add(name=name)
    return request.SerializeToString()


async def infer(channel, arrays: dict, model: str = "m", outputs=()) -> dict:
    """{output name: array} of one gRPC-encoded request run by the worker behind `channel`."""
    head, tensors = infer_frame([InferRequest(model, "", "grpc", grpc_body(model, arrays, outputs), math.inf)])
    reply = await channel.request(wire.Kind.INFER, head, tensors)
    (answer,), _ = parse_answer(reply, 1, MAX_BYTES)
    if isinstance(answer, Exception):
        raise answer
    return decode_response(pb.ModelInferResponse.FromString(answer.body.tobytes()))
