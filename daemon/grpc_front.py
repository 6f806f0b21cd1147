"""The gRPC front: KServe v2 `inference.GRPCInferenceService` for tenants, grpc.health.v1,
and `rtd.Admin/Status` for operators. Each handler only authenticates, translates the
message onto the Supervisor API and back, and maps refusals through the ONE table
(`Code.status`); anything unexpected is INTERNAL "Internal server error" with no details.
RPCs not registered here (shared memory, trace/log settings, statistics, streaming) are
answered UNIMPLEMENTED by gRPC itself.
"""
import json
import sys
import traceback

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rtd import __version__
from rtd.daemon.tenants import Tenants
from rtd.daemon.tensors import decode_request, encode_response
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb

SERVICE = "inference.GRPCInferenceService"
ADMIN_SERVICE = "rtd.Admin"
SERVER_NAME = "rtd"
EXTENSIONS = ["model_repository", "model_configuration", "binary_tensor_data"]
FILE_PREFIX = "file:"


def _refuse(context, e: RtdError):
    if e.code == Code.E_INTERNAL:  # details of an internal failure stay in the daemon's log
        print(f"rtd: {e}", file=sys.stderr)
        context.abort(grpc.StatusCode.INTERNAL, f"{Code.E_INTERNAL.name}: Internal server error")
    context.abort(getattr(grpc.StatusCode, e.code.status), str(e))


def _guarded(method, needs_tenant=True):
    """Authenticate, call, and map every refusal to its status; hide anything unexpected."""
    def handler(self, request, context):
        try:
            if needs_tenant:
                tenant = self.tenants.authenticate(context.invocation_metadata())
                return method(self, tenant, request, context)
            return method(self, request, context)
        except RtdError as e:
            _refuse(context, e)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            context.abort(grpc.StatusCode.INTERNAL, "Internal server error")
    handler.__name__ = method.__name__
    return handler


def _public(method):
    """Liveness, readiness and server metadata: answered without credentials, like Triton."""
    return _guarded(method, needs_tenant=False)


class InferenceService:
    """Translates KServe v2 messages onto the Supervisor."""

    def __init__(self, supervisor, max_message_bytes: int):
        self.supervisor = supervisor
        self.tenants = Tenants(supervisor.config)
        self.max_bytes = max_message_bytes

    @_public
    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    @_public
    def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.supervisor.ready())

    @_public
    def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=__version__, extensions=EXTENSIONS)

    @_guarded
    def ModelReady(self, tenant, request, context):
        return pb.ModelReadyResponse(ready=self.supervisor.model_ready(tenant, request.name, request.version))

    @_guarded
    def ModelMetadata(self, tenant, request, context):
        meta = self.supervisor.metadata(tenant, request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"],
                                        inputs=[tensor(**t) for t in meta["inputs"]],
                                        outputs=[tensor(**t) for t in meta["outputs"]])

    @_guarded
    def ModelConfig(self, tenant, request, context):
        return pb.ModelConfigResponse(config=self.supervisor.model_config(tenant, request.name, request.version))

    @_guarded
    def ModelInfer(self, tenant, request, context):
        inputs = decode_request(request, self.max_bytes)
        outputs = [o.name for o in request.outputs] or None
        timeout = context.time_remaining()
        if "timeout" in request.parameters:  # tritonclient's client_timeout, microseconds
            param = request.parameters["timeout"]
            micros = param.int64_param or param.uint64_param
            timeout = min(timeout or float("inf"), micros / 1e6) if micros > 0 else timeout
        version, results = self.supervisor.infer(tenant, request.model_name, request.model_version, inputs,
                                                 outputs, timeout)
        response = pb.ModelInferResponse(model_name=request.model_name, model_version=version, id=request.id)
        encode_response(response, results)
        return response

    @_guarded
    def RepositoryIndex(self, tenant, request, context):
        index = pb.RepositoryIndexResponse.ModelIndex
        models = [m for m in self.supervisor.models(tenant) if not request.ready or m["state"] == "READY"]
        return pb.RepositoryIndexResponse(models=[index(name=m["name"], version=m["version"], state=m["state"],
                                                        reason=m["reason"]) for m in models])

    @_guarded
    def RepositoryModelLoad(self, tenant, request, context):
        files, config = {}, None
        for key, param in request.parameters.items():
            which = param.WhichOneof("parameter_choice")
            if key.startswith(FILE_PREFIX) and which == "bytes_param":
                files[key[len(FILE_PREFIX):]] = param.bytes_param
            elif key == "config" and which == "string_param":
                config = param.string_param
            else:
                raise RtdError(Code.E_REQUEST_INVALID, f"load parameter {key!r} is not offered (signed packages only)")
        self.supervisor.load(tenant, request.model_name, files, config)
        return pb.RepositoryModelLoadResponse()

    @_guarded
    def RepositoryModelUnload(self, tenant, request, context):
        # unload_dependents is accepted and ignored: rtd models have no dependents
        self.supervisor.unload(tenant, request.model_name)
        return pb.RepositoryModelUnloadResponse()

    def handlers(self) -> grpc.GenericRpcHandler:
        messages = {
            "ServerLive": pb.ServerLiveRequest, "ServerReady": pb.ServerReadyRequest,
            "ServerMetadata": pb.ServerMetadataRequest, "ModelReady": pb.ModelReadyRequest,
            "ModelMetadata": pb.ModelMetadataRequest, "ModelConfig": pb.ModelConfigRequest,
            "ModelInfer": pb.ModelInferRequest, "RepositoryIndex": pb.RepositoryIndexRequest,
            "RepositoryModelLoad": pb.RepositoryModelLoadRequest, "RepositoryModelUnload": pb.RepositoryModelUnloadRequest,
        }
        return grpc.method_handlers_generic_handler(SERVICE, {
            rpc: grpc.unary_unary_rpc_method_handler(getattr(self, rpc), request_deserializer=req.FromString,
                                                     response_serializer=lambda m: m.SerializeToString())
            for rpc, req in messages.items()})


class AdminService:
    """Operator views (rtctl status) behind the admin token; JSON bytes on the wire."""

    def __init__(self, supervisor):
        self.supervisor = supervisor
        self.tenants = Tenants(supervisor.config)

    def Status(self, request: bytes, context) -> bytes:
        try:
            self.tenants.authenticate_admin(context.invocation_metadata())
            return json.dumps(self.supervisor.status(), default=str).encode()
        except RtdError as e:
            _refuse(context, e)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            context.abort(grpc.StatusCode.INTERNAL, "Internal server error")

    def handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(ADMIN_SERVICE, {
            "Status": grpc.unary_unary_rpc_method_handler(self.Status)})


def build_server(supervisor, executor) -> tuple[grpc.Server, health.HealthServicer]:
    """The gRPC server with every service registered and message sizes bounded explicitly."""
    limit = supervisor.config.limits.max_message_bytes
    server = grpc.server(executor, options=[("grpc.max_receive_message_length", limit),
                                            ("grpc.max_send_message_length", limit)])
    server.add_generic_rpc_handlers([InferenceService(supervisor, limit).handlers(), AdminService(supervisor).handlers()])
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    return server, health_servicer
