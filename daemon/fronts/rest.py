"""The REST front: KServe v2 (Open Inference Protocol) routes with Triton's paths and its
binary tensor extension, as `tritonclient.http` speaks them. Each handler only translates a
call onto the Supervisor API and back, as the gRPC front does; the transport
(transport/rest_h1.py) owns the connection, and refusals become HTTP statuses there.

Statistics are those of the gRPC front (kserve.model_statistics). An inference body is handed
on unread (the worker parses it); the JSON parsed here is that of control calls, whose bodies
the transport holds to CONTROL_MESSAGE_BYTES. A load's JSON stays in its spool and is decoded
by the tenant's confined upload decoder (serving/uploads.py).
"""
import functools
import json
import re
import urllib.parse

from google.protobuf import json_format

from rtd import __version__, jsondoc
from rtd.daemon.transport.contract import Call, Method, Reply
from rtd.daemon.transport.rest_h1 import length_of
from rtd.daemon.fronts import kserve
from rtd.daemon.fronts.kserve import EXTENSIONS, SERVER_NAME, describe, model_statistics, repository_index
from rtd.daemon.serving.scheduler import InferRequest
from rtd.errors import Code, RtdError
from rtd.jsondoc import field

MAX_JSON_VALUES = 1 << 20
INFER_HEADER = "inference-header-content-length"
MODEL = r"/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?"


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


def _ok(doc=None) -> Reply:
    return Reply([] if doc is None else [json.dumps(doc).encode()])


class Front:
    """KServe v2 REST routes onto the Supervisor."""

    def __init__(self, supervisor):
        self.supervisor, self.ledger = supervisor, supervisor.ledger
        self.max_bytes = supervisor.config.limits.max_message_bytes
        public, control = dict(public=True), dict(control=True)
        work = dict(spool=functools.partial(kserve.request_body, supervisor.ledger))
        upload = dict(spool=functools.partial(kserve.upload_spool, supervisor))
        self.routes = [(verb, re.compile(pattern), Method(handler, **kind)) for verb, pattern, handler, kind in (
            ("GET", r"/v2/health/live", self.live, public), ("GET", r"/v2/health/ready", self.ready, public),
            ("GET", r"/v2", self.server_metadata, public),
            ("GET", r"/v2/models/stats", self.statistics, control), ("GET", MODEL + "/stats", self.statistics, control),
            ("GET", MODEL + "/ready", self.model_ready, control), ("GET", MODEL + "/config", self.model_config, control),
            ("GET", MODEL, self.model_metadata, control), ("POST", r"/v2/repository/index", self.index, control),
            ("POST", r"/v2/repository/models/(?P<name>[^/]+)/unload", self.unload, control),
            ("POST", MODEL + "/infer", self.infer, work), ("POST", r"/v2/repository/models/(?P<name>[^/]+)/load", self.load, upload),
        )]

    def authenticate(self, metadata, method: Method) -> str:
        """Who pays for a call: the caller's tenant."""
        return self.supervisor.tenants.authenticate(metadata).id

    describe = staticmethod(describe)

    def route(self, verb: str, target: str) -> tuple[Method, dict]:
        path = target.split("?", 1)[0]
        for want, pattern, method in self.routes:
            match = pattern.fullmatch(path)
            if match and want == verb:
                return method, {k: urllib.parse.unquote(v) for k, v in match.groupdict().items() if v is not None}
        raise RtdError(Code.E_UNIMPLEMENTED, f"{verb} {path[:100]}")

    def _tenant(self, request: Call):
        return self.supervisor.tenants.by_id[request.who]

    # -- public ----------------------------------------------------------------------------------
    # The status answers (Triton's clients read only it); the JSON body is what KServe's own
    # REST client reads (`{"live": true}`, `{"ready": true}`, as KServe's model server sends).
    async def live(self, request):
        return _ok({"live": True})

    async def ready(self, request):
        if self.supervisor.ready():
            return _ok({"ready": True})
        raise RtdError(Code.E_MODEL_UNAVAILABLE, "the daemon is not ready")

    async def server_metadata(self, request):
        return _ok({"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS})

    # -- control ---------------------------------------------------------------------------------
    async def model_ready(self, request):
        if self.supervisor.model_ready(self._tenant(request), request.params["name"], request.params.get("version", "")):
            return _ok()
        raise RtdError(Code.E_MODEL_UNAVAILABLE, repr(request.params["name"]))

    async def model_metadata(self, request):
        return _ok(self.supervisor.metadata(self._tenant(request), request.params["name"], request.params.get("version", "")))

    async def model_config(self, request):
        config = self.supervisor.model_config(self._tenant(request), request.params["name"], request.params.get("version", ""))
        return _ok(json_format.MessageToDict(config, preserving_proto_field_name=True))

    async def statistics(self, request):
        stats = model_statistics(self.supervisor, self._tenant(request), request.params.get("name", ""),
                                 request.params.get("version", ""))
        return _ok({"model_stats": stats})

    async def index(self, request):
        ready = field(jsondoc.parse(request.message, "the request", MAX_JSON_VALUES), "ready", bool, "request", False)
        return _ok(await repository_index(self.supervisor, self._tenant(request), ready))

    async def unload(self, request):
        jsondoc.parse(request.message, "the request", MAX_JSON_VALUES)   # unload_dependents is accepted and ignored: rtd models have none
        await self.supervisor.unload(self._tenant(request), request.params["name"])
        return _ok()

    # -- work ------------------------------------------------------------------------------------
    async def load(self, request):
        """The package's files, decoded from the spooled JSON by the tenant's confined upload decoder
        (serving/uploads.py), loaded from there: the supervisor never parses the upload."""
        tenant = self._tenant(request)
        upload = await self.supervisor.rest_upload(tenant, request.message)
        await kserve.load(self.supervisor, tenant, request.params["name"], upload)
        return _ok()

    async def infer(self, request):
        """Hand the body on unread: the worker parses its JSON and binary tensors, checks
        them against the model and builds the response."""
        split = dict(request.metadata).get(INFER_HEADER)
        json_length = None if split is None else length_of(split) if split != "0" else 0
        if split is not None and (json_length is None or json_length > len(request.message)):
            raise RtdError(Code.E_REQUEST_INVALID, f"{INFER_HEADER} is not a length within the body")
        result = await self.supervisor.infer(self._tenant(request), InferRequest(
            request.params["name"], request.params.get("version", ""), "rest", request.message, json_length=json_length,
            received=request.received))
        return Reply([result.body], result.charges, json_length=result.json_length)
