"""A small gRPC client of the daemon for rtctl, the benchmark and the tests: the same KServe
v2 messages a tritonclient sends, plus the admin status view. Refusals come back as
RtdError with the code the daemon named (the status details start with `E_...:`); a call
the daemon never answered (nothing listening, the connection cut) is E_DAEMON_UNREACHABLE."""
import json

import grpc

from rtd.proto import ADMIN_SERVICE, SERVICE
from rtd.proto import FILE_PREFIX, PROFILE_PARAMETER
from rtd.tensors import decode_response, encode_inputs
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb

MAX_MESSAGE = 1 << 30
RPCS = {
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
    "RepositoryIndex": (pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
    "RepositoryModelLoad": (pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse),
    "RepositoryModelUnload": (pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse),
}


def read_token(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError:
        raise RtdError(Code.E_PATH_NOT_FOUND, f"token file {path} (pass {flag})") from None


def _as_rtd_error(e: grpc.RpcError, target: str) -> RtdError:
    details = e.details() or ""
    name = details.split(":", 1)[0]
    code = Code.__members__.get(name)
    if code is None and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:   # the client's own deadline
        return RtdError(Code.E_DEADLINE, details)
    if code is None and e.code() == grpc.StatusCode.UNAVAILABLE:   # the daemon names its own UNAVAILABLEs
        return RtdError(Code.E_DAEMON_UNREACHABLE, f"nothing answers at {target}: is `rtd serve` running there? "
                                                   f"gRPC: {details[:60]}")
    if code is None:
        return RtdError(Code.E_INTERNAL, f"{e.code().name}: {details}")
    detail = details[details.find("(") + 1: -1] if details.endswith(")") and "(" in details else ""
    return RtdError(code, detail)


class Client:
    def __init__(self, target: str, token: str | None, credentials: grpc.ChannelCredentials | None = None,
                 options=()):
        options = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE),
                   *options]
        self.target = target
        self.channel = (grpc.secure_channel(target, credentials, options) if credentials
                        else grpc.insecure_channel(target, options))
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.stubs = {rpc: self.channel.unary_unary(f"/{SERVICE}/{rpc}", request_serializer=req.SerializeToString,
                                                    response_deserializer=resp.FromString)
                      for rpc, (req, resp) in RPCS.items()}

    def close(self) -> None:
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, rpc: str, request, timeout: float | None = None, metadata=None):
        try:
            return self.stubs[rpc](request, metadata=metadata or self.metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise _as_rtd_error(e, self.target) from None

    def ready(self, timeout: float = 5.0) -> bool:
        return self.call("ServerReady", pb.ServerReadyRequest(), timeout).ready

    def load(self, name: str, files: dict, timeout: float | None = None) -> None:
        params = {FILE_PREFIX + path: pb.ModelRepositoryParameter(bytes_param=bytes(data)) for path, data in files.items()}
        self.call("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name=name, parameters=params), timeout)

    def unload(self, name: str) -> None:
        self.call("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name=name))

    def index(self) -> list:
        return list(self.call("RepositoryIndex", pb.RepositoryIndexRequest()).models)

    def metadata_of(self, name: str) -> pb.ModelMetadataResponse:
        return self.call("ModelMetadata", pb.ModelMetadataRequest(name=name))

    def infer(self, name: str, inputs: dict, outputs: list | None = None, timeout: float | None = None,
              profile: bool = False) -> dict:
        """{output: ndarray}; with `profile`, also the worker's Chrome trace as output `rtd.trace`."""
        tensors, raw = encode_inputs(inputs)
        request = pb.ModelInferRequest(model_name=name, inputs=tensors, raw_input_contents=raw,
                                       outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name=o) for o in outputs or ()])
        if profile:
            request.parameters[PROFILE_PARAMETER].bool_param = True
        return decode_response(self.call("ModelInfer", request, timeout))

    def _admin(self, rpc: str, admin_token: str, body: bytes = b"") -> bytes:
        method = self.channel.unary_unary(f"/{ADMIN_SERVICE}/{rpc}")
        try:
            return method(body, metadata=(("authorization", f"Bearer {admin_token}"),), timeout=30)
        except grpc.RpcError as e:
            raise _as_rtd_error(e, self.target) from None

    def status(self, admin_token: str) -> dict:
        return json.loads(self._admin("Status", admin_token))

    def reload(self, admin_token: str) -> None:
        """Re-read tenant tokens and trust stores, as SIGHUP does; a refusal says why."""
        self._admin("Reload", admin_token)

    def repair(self, admin_token: str, tenant: str) -> list[str]:
        """Have the daemon write a tenant's damaged state files again from what it knows; what it did."""
        return json.loads(self._admin("Repair", admin_token, json.dumps({"tenant": tenant}).encode()))["done"]
