"""The gRPC front: KServe v2 `inference.GRPCInferenceService` for tenants, grpc.health.v1
and `rtd.Admin/Status`, `rtd.Admin/Reload` and `rtd.Admin/Repair` for operators, served by rtd's own HTTP/2 transport (transport/grpc_h2.py).
Each handler only translates the message onto the Supervisor API and back; refusals are
mapped through the ONE table (`Code.status`) in `kserve.describe`; anything unexpected is INTERNAL
"Internal server error" with no details. RPCs not listed here (shared memory, trace/log
settings, streaming) are answered UNIMPLEMENTED by the transport.
"""
import functools
import json
import math

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from rtd import __version__
from rtd.daemon.serving.budgets import OPERATOR
from rtd.daemon.transport.contract import Call, Method, Reply
from rtd.daemon.fronts import kserve
from rtd.daemon.fronts.kserve import EXTENSIONS, SERVER_NAME, deadline_of, describe, model_statistics, repository_index
from rtd.daemon.serving.uploads import from_grpc
from rtd.daemon.serving.scheduler import InferRequest
from rtd.infer_request import declared_inputs, scan
from rtd.errors import Code, RtdError
from rtd.proto import ADMIN_SERVICE, SERVICE
from rtd.proto import grpc_service_pb2 as pb

HEALTH_SERVICE = "grpc.health.v1.Health"
def _message(cls, call: Call | memoryview):
    """The call's request message; one that does not parse is the client's error."""
    try:
        return cls.FromString(call.message if isinstance(call, Call) else call)
    except DecodeError:
        raise RtdError(Code.E_REQUEST_INVALID, f"not a {cls.DESCRIPTOR.name} message") from None


def _reply(message) -> Reply:
    return Reply([message.SerializeToString()])


class Front:
    """Translates KServe v2 (and the admin and health services) onto the Supervisor."""

    def __init__(self, supervisor, reload):
        """`reload()`: re-read tenant tokens and trust stores as SIGHUP does, or raise RtdError."""
        self.supervisor, self.reload = supervisor, reload
        self.max_bytes = supervisor.config.limits.max_message_bytes
        public, control = dict(public=True), dict(control=True)
        work = dict(spool=functools.partial(kserve.request_body, supervisor.ledger))
        upload = dict(spool=functools.partial(kserve.upload_spool, supervisor))
        routes = {
            (SERVICE, "ServerLive"): (self.server_live, public), (SERVICE, "ServerReady"): (self.server_ready, public),
            (SERVICE, "ServerMetadata"): (self.server_metadata, public),
            (HEALTH_SERVICE, "Check"): (self.health_check, public),
            (SERVICE, "ModelReady"): (self.model_ready, control), (SERVICE, "ModelMetadata"): (self.model_metadata, control),
            (SERVICE, "ModelConfig"): (self.model_config, control),
            (SERVICE, "RepositoryIndex"): (self.repository_index, control),
            (SERVICE, "ModelStatistics"): (self.model_statistics, control),
            (SERVICE, "RepositoryModelUnload"): (self.repository_unload, control),
            (ADMIN_SERVICE, "Status"): (self.admin_status, control), (ADMIN_SERVICE, "Reload"): (self.admin_reload, control),
            (ADMIN_SERVICE, "Repair"): (self.admin_repair, control),
            (SERVICE, "ModelInfer"): (self.model_infer, work), (SERVICE, "RepositoryModelLoad"): (self.repository_load, upload),
        }
        self.methods = {f"/{service}/{rpc}": Method(handler, **kind) for (service, rpc), (handler, kind) in routes.items()}

    describe = staticmethod(describe)

    def authenticate(self, metadata, method: Method) -> str:
        """Who pays for a call: the operator for admin calls, else the caller's tenant."""
        if method.handler in (self.admin_status, self.admin_reload, self.admin_repair):
            self.supervisor.tenants.authenticate_admin(metadata)
            return OPERATOR
        return self.supervisor.tenants.authenticate(metadata).id

    def _tenant(self, call: Call):
        return self.supervisor.tenants.by_id[call.who]

    async def _audited(self, call: Call, action: str, work, **fields) -> None:
        """An action that changes what the daemon serves or trusts, logged as one `event=audit`
        line: who (tenant or admin), from which peer, what, and the result (ok or the code)."""
        result = Code.E_INTERNAL.name
        try:
            await work
            result = "ok"
        except RtdError as e:
            result = e.code.name
            raise
        finally:
            operator = call.who == OPERATOR
            self.supervisor.events.emit("audit", None if operator else call.who, who="admin" if operator else call.who,
                                        peer=call.peer, action=action, result=result, **fields)

    # -- public ----------------------------------------------------------------------------------
    async def server_live(self, call):
        return _reply(pb.ServerLiveResponse(live=True))

    async def server_ready(self, call):
        return _reply(pb.ServerReadyResponse(ready=self.supervisor.ready()))

    async def server_metadata(self, call):
        return _reply(pb.ServerMetadataResponse(name=SERVER_NAME, version=__version__, extensions=EXTENSIONS))

    async def health_check(self, call):
        status = health_pb2.HealthCheckResponse.SERVING if self.supervisor.ready() else health_pb2.HealthCheckResponse.NOT_SERVING
        return _reply(health_pb2.HealthCheckResponse(status=status))

    # -- control ---------------------------------------------------------------------------------
    async def model_ready(self, call):
        request = _message(pb.ModelReadyRequest, call)
        return _reply(pb.ModelReadyResponse(ready=self.supervisor.model_ready(self._tenant(call), request.name, request.version)))

    async def model_metadata(self, call):
        request = _message(pb.ModelMetadataRequest, call)
        meta = self.supervisor.metadata(self._tenant(call), request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return _reply(pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"],
                                               inputs=[tensor(**t) for t in meta["inputs"]],
                                               outputs=[tensor(**t) for t in meta["outputs"]]))

    async def model_config(self, call):
        request = _message(pb.ModelConfigRequest, call)
        return _reply(pb.ModelConfigResponse(config=self.supervisor.model_config(self._tenant(call), request.name,
                                                                                 request.version)))

    async def repository_index(self, call):
        request = _message(pb.RepositoryIndexRequest, call)
        index = pb.RepositoryIndexResponse.ModelIndex
        models = await repository_index(self.supervisor, self._tenant(call), request.ready)
        return _reply(pb.RepositoryIndexResponse(models=[index(**m) for m in models]))

    async def model_statistics(self, call):
        request = _message(pb.ModelStatisticsRequest, call)
        stats = model_statistics(self.supervisor, self._tenant(call), request.name, request.version)
        return _reply(json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse()))

    async def repository_unload(self, call):
        # unload_dependents is accepted and ignored: rtd models have no dependents
        request = _message(pb.RepositoryModelUnloadRequest, call)
        await self._audited(call, "unload", self.supervisor.unload(self._tenant(call), request.model_name),
                            model=request.model_name)
        return _reply(pb.RepositoryModelUnloadResponse())

    async def admin_status(self, call):
        return Reply([json.dumps(self.supervisor.status(), default=str).encode()])

    async def admin_reload(self, call):
        async def reload():
            self.reload()
        await self._audited(call, "reload", reload())
        return Reply([b""])

    async def admin_repair(self, call):
        """`rtctl state repair`: {"tenant": ID} -> {"done": [what was written again]}."""
        try:
            tenant = json.loads(bytes(call.message))["tenant"]
        except (ValueError, TypeError, KeyError):
            raise RtdError(Code.E_REQUEST_INVALID, 'the body is {"tenant": ID}') from None
        if not isinstance(tenant, str):
            raise RtdError(Code.E_REQUEST_INVALID, 'the body is {"tenant": ID}')
        done = []

        async def repair():
            done.extend(await self.supervisor.repair(tenant))
        await self._audited(call, "repair", repair(), repaired=tenant[:64])
        return Reply([json.dumps({"tenant": tenant, "done": done}).encode()])

    # -- work ------------------------------------------------------------------------------------
    async def model_infer(self, call):
        """Read the request's header (bounded, its tensors untouched), check it against the
        model and hand the bytes on; the worker decodes them and builds the response."""
        head = scan(call.message.view())
        declared = declared_inputs(head, self.max_bytes)
        inputs = {name: (row.wire, shape) for name, (row, shape, _) in declared.items()}
        firsts = {shape[0] if shape else None for _, shape in inputs.values()}
        timeout = head.parameters.get("timeout")   # tritonclient's, microseconds
        request = InferRequest(head.model_name, head.model_version, "grpc", call.message,
                               deadline_of(call.deadline, timeout if type(timeout) is int else 0) or math.inf, inputs,
                               [o.name for o in head.outputs] or None, firsts.pop() if len(firsts) == 1 else None,
                               received=call.received)
        result = await self.supervisor.infer(self._tenant(call), request)
        return Reply([result.body], result.charges)

    async def repository_load(self, call):
        """Find the package's files in the spooled request (a bounded walk, rtd/load_request.py) and
        load them from there: the package never passes through the supervisor's memory."""
        name, upload = from_grpc(call.message)
        await self._audited(call, "load", kserve.load(self.supervisor, self._tenant(call), name, upload), model=name)
        return _reply(pb.RepositoryModelLoadResponse())
