"""The EC2 API as an ASGI app: each request is checked (browser guard, method, SigV4 signature when credentials are
configured), its parameters read, and its ``Action`` dispatched to the handler an action module registered. Every
refusal, and every failure, is answered in EC2's error shape."""

from __future__ import annotations

import inspect
import logging
import uuid

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route, request_response

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Maintenance
from forewarn.aws.autoscaling import api as autoscaling_api
from forewarn.aws.ec2_api import attributes, events, instances, windows
from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.ec2_api.params import Params, read_params
from forewarn.aws.ec2_api.protocol import API_VERSION, Ec2Error, error_response, missing
from forewarn.aws.ec2_api.registry import ACTIONS
from forewarn.aws.ec2_api.sigv4 import SigV4Verifier, received, signed_region
from forewarn.aws.eventbridge import api as events_api
from forewarn.aws.faults import faults_of
from forewarn.aws.sqs import api as sqs_api
from forewarn.aws.sqs import protocol as sqs_protocol
from forewarn.net.browser_guard import BrowserGuard, Refusal

log = logging.getLogger("forewarn.ec2api")

# The modules whose handlers fill the registry: a new action module is added here.
ACTION_MODULES = (instances, events, windows, attributes)

# The browser guard's refusals in EC2's codes: a Host it does not answer to is a bad request; a request from a web
# page of another origin is not authorized.
GUARD_CODES = {"InvalidHost": "InvalidRequest", "CrossOriginRequest": "UnauthorizedOperation"}

# The throttling errors each service answers with ("Request throttling for the Amazon EC2 API"; the Amazon SQS,
# EventBridge and EC2 Auto Scaling API References, "Common Errors").
SQS_THROTTLED = sqs_protocol.SqsError("RequestThrottled", "Rate exceeded")


def guard_error(refusal: Refusal) -> Ec2Error:
    return Ec2Error(GUARD_CODES.get(refusal.code, refusal.code), refusal.message, refusal.status)


class Ec2Api:
    def __init__(
        self, service: Maintenance, credentials: dict[str, str] | None = None, guard: BrowserGuard | None = None
    ):
        self.backend = Ec2Backend(service)
        self.sqs = sqs_api.SqsApi(service)
        self.events = events_api.EventsApi(service)
        self.autoscaling = autoscaling_api.AutoScalingApi(service)
        self.guard = guard
        self.faults = faults_of(service)
        # None: signatures are not verified (any credentials, or none, are accepted).
        self.verifier = None if credentials is None else SigV4Verifier(credentials, self.backend.wall)

    async def endpoint(self, request: Request) -> Response:
        request_id = str(uuid.uuid4())
        try:
            refusal = self.guard.check(request.method, request.headers) if self.guard is not None else None
            if refusal is not None:
                raise guard_error(refusal)
            if request.method not in ("GET", "POST", "HEAD"):
                raise Ec2Error(
                    "MethodNotAllowed", f"The HTTP method {request.method} is not supported; use POST or GET.", 405
                )
            target = request.headers.get("x-amz-target")
            if target is not None and target.startswith(sqs_protocol.TARGET_PREFIX):
                return await self.sqs_json(request, target, request_id)
            if target is not None and target.startswith(events_api.TARGET_PREFIX):
                return await self.events_json(request, target, request_id)
            try:
                params: Params | None = await read_params(request)
            except Ec2Error:
                params = None  # refused below, after the signature (as before SQS shared the port)
            if params is not None and params.get("Version") == sqs_protocol.API_VERSION:
                return await self.sqs_query(request, params, request_id)
            if params is not None and params.get("Version") == autoscaling_api.API_VERSION:
                return await self.autoscaling_query(request, params, request_id)
            if self.verifier is not None:
                body = await request.body() if request.method == "POST" else b""
                self.verifier.verify(received(request, body))
            return await self.dispatch(params or await read_params(request), request_id)
        except Ec2Error as error:
            return error_response(error, request_id)
        except Unavailable as error:
            return error_response(
                Ec2Error("ServiceUnavailable", f"Nothing was changed; the store failed: {error}", 503), request_id
            )
        except ClientDisconnect:  # no one to answer (server/listeners.py says so in the log)
            raise
        except Exception:  # a bug: still answer in EC2's shape (retryable), and say so in the log
            log.exception("EC2 API request %s failed", request_id)
            return error_response(
                Ec2Error(
                    "InternalError", f"forewarn failed to process the request; see its log (request {request_id}).", 503
                ),
                request_id,
            )

    async def sqs_json(self, request: Request, target: str, request_id: str) -> Response:
        body = await request.body()
        try:
            if self.verifier is not None:
                self.verifier.verify(received(request, body), "sqs")
        except Ec2Error as error:
            return sqs_protocol.json_error(
                sqs_protocol.SqsError(error.code, error.message, status=error.status), request_id
            )
        if self.faults.throttled("sqs", target[len(sqs_protocol.TARGET_PREFIX) :]):
            return sqs_protocol.json_error(SQS_THROTTLED, request_id)
        region = signed_region(request.headers.get("authorization"), {})
        return await sqs_api.json_call(self.sqs, target, body, _origin(request), region, request_id)

    async def events_json(self, request: Request, target: str, request_id: str) -> Response:
        body = await request.body()
        try:
            if self.verifier is not None:
                self.verifier.verify(received(request, body), "events")
        except Ec2Error as error:
            return events_api.error_response(
                events_api.EventsError(error.code, error.message, error.status), request_id
            )
        if self.faults.throttled("events", target[len(events_api.TARGET_PREFIX) :]):
            return events_api.error_response(events_api.EventsError("ThrottlingException", "Rate exceeded"), request_id)
        region = signed_region(request.headers.get("authorization"), {})
        return await self.events.call(target, body, region, request_id)

    async def autoscaling_query(self, request: Request, params: Params, request_id: str) -> Response:
        try:
            if self.verifier is not None:
                body = await request.body() if request.method == "POST" else b""
                self.verifier.verify(received(request, body), "autoscaling")
        except Ec2Error as error:
            return autoscaling_api.error_response(
                autoscaling_api.AutoScalingError(error.code, error.message, error.status), request_id
            )
        if self.faults.throttled("autoscaling", params.get("Action") or ""):
            return autoscaling_api.error_response(
                autoscaling_api.AutoScalingError("Throttling", "Rate exceeded"), request_id
            )
        return await self.autoscaling.call(params.values, request_id)

    async def sqs_query(self, request: Request, params: Params, request_id: str) -> Response:
        try:
            if self.verifier is not None:
                body = await request.body() if request.method == "POST" else b""
                self.verifier.verify(received(request, body), "sqs")
        except Ec2Error as error:
            return sqs_protocol.query_error(
                sqs_protocol.SqsError(error.code, error.message, status=error.status), request_id
            )
        if self.faults.throttled("sqs", params.get("Action") or ""):
            return sqs_protocol.query_error(SQS_THROTTLED, request_id)
        url = _origin(request) + request.url.path
        return await sqs_api.query_call(self.sqs, dict(params.values), url, params.region, request_id)

    async def dispatch(self, params: Params, request_id: str) -> Response:
        action = params.get("Action")
        if not action:
            raise Ec2Error("MissingAction", "The request must contain the parameter Action")
        handler = ACTIONS.get(action)
        if handler is None:
            raise Ec2Error("InvalidAction", f"The action {action} is not valid for this web service.")
        version = params.get("Version")
        if not version:
            raise missing("Version")
        if version != API_VERSION:
            raise Ec2Error("NoSuchVersion", f"The requested version ({version}) of service AmazonEC2 does not exist")
        if self.faults.throttled("ec2", action):
            raise Ec2Error("RequestLimitExceeded", "Request limit exceeded.", 503)
        answer = handler(self.backend, params, request_id)
        return await answer if inspect.isawaitable(answer) else answer


def _origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"


def create_ec2_app(
    service: Maintenance, credentials: dict[str, str] | None = None, guard: BrowserGuard | None = None
) -> Starlette:
    """The EC2 Query API over ``service``, as an ASGI app (serve it as an EC2 endpoint).

    ``credentials`` (access key ID → secret access key): verify every request's SigV4 signature against them
    (needs botocore, the extra sigv4: ExtraMissing here when it is missing). None (the default): accept any credentials, or none.
    ``guard``: refuse what web pages send (browser_guard.py) before anything else."""
    api = Ec2Api(service, credentials, guard)
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]  # other methods are answered in EC2's shape
    app = Starlette(routes=[Route("/{path:path}", api.endpoint, methods=methods)])
    # Starlette's path pattern does not match a newline: a path with %0A in it would get a plain-text 404.
    app.router.default = request_response(api.endpoint)
    app.state.ec2 = api.backend
    return app
