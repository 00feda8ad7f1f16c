"""A double of the Kubernetes API server, for tests (no API server can run here).

A ``ThreadingHTTPServer`` on 127.0.0.1 (random port, HTTPS with a throwaway CA: kubectl will
not send a bearer token over plain HTTP; the kubeconfig it writes carries the CA and a token, as
a real cluster's does) that answers the
REST API in its real wire format: objects with apiVersion/kind/metadata/resourceVersion,
``<Kind>List`` collections (items without kind/apiVersion, as the server sends them), ``Status``
objects with code/reason/details for every error, and server-side Tables for ``kubectl get``.
State is seeded from fixtures in the shape ``kubectl get -o json`` writes (tests/k8s/fixtures/,
see its README) and lives in a
:class:`~tests.k8s.store.ClusterState`; every request is logged (method, path, query, content
type, parsed body, answer code) so a test can assert exactly what a client wrote.

Endpoints:

- ``/version``, ``/healthz``, ``/livez``, ``/readyz``; discovery: ``/api``, ``/api/v1``,
  ``/apis``, ``/apis/GROUP``, ``/apis/GROUP/VERSION`` (legacy form; the aggregated
  ``apidiscovery.k8s.io/v2`` form is not offered, so clients fall back); ``/openapi/v2`` and
  ``/openapi/v3`` answer 404, as on a server that does not publish them (kubectl and the
  Python client fall back: neither needs OpenAPI for get/patch/cordon/drain).
- For each resource in tests/k8s/resources.py (namespaces, nodes, pods, poddisruptionbudgets,
  daemonsets, deployments, replicasets, statefulsets, jobs, and the Kubeflow custom resources
  pytorchjobs, tfjobs (kubeflow.org/v1) and mpijobs (kubeflow.org/v2beta1)): list
  (``labelSelector``, ``fieldSelector``; all namespaces or one), get, create (POST), replace
  (PUT), patch (json, merge, strategic merge), delete, and ``/status`` get/put/patch;
  ``pods/NAME/eviction`` (POST, policy/v1 Eviction, PDBs evaluated as eviction.go does);
  ``?dryRun=All`` on writes.
- ``pods/NAME/exec`` and ``pods/NAME/attach`` over WebSocket (``v5.channel.k8s.io`` or
  ``v4.channel.k8s.io``, tests/k8s/streams.py), ``pods/NAME/exec`` over SPDY/3.1 (kubectl's
  fallback, ``v4.channel.k8s.io``, tests/k8s/spdy.py): the command runs on the SSH test host
  attached as the pod's node (:meth:`ApiServerDouble.attach_node`); a pod created on an
  attached node moves from Pending to Running after ``start_delay`` seconds, as its kubelet
  would report it.
- A bearer token is required (the one written into the kubeconfig): 401 Unauthorized without.

Every request is recorded with the RBAC attributes a real server authorizes it by
(:attr:`RecordedRequest.verbs`, :attr:`RecordedRequest.resource`,
:attr:`RecordedRequest.api_group`),
so a test can check that what a client did is allowed by a shipped Role.

Not served (answered with a Status): attach over SPDY/3.1 (exec is served, spdy.py),
watch (405), deletecollection (405), server-side apply
(``application/apply-patch+yaml``: 415), protobuf (406 unless JSON is also acceptable),
``limit``/``continue`` paging (the whole list comes back in one page).
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.k8s import resources, spdy, streams
from tests.k8s.resources import BY_PATH, Resource
from tests.k8s.selectors import SelectorSyntaxError
from tests.k8s.store import ApiError, ClusterState, bad_request
from tests.k8s.tls import make_serving_cert

TOKEN = "api-double-token"
FIXTURES = Path(__file__).parent / "fixtures"
DEFAULT_SEED = (
    "nodes.json",
    "pods.json",
    "poddisruptionbudgets.json",
    "workloads.json",
)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any
    status: int
    user_agent: str = ""
    #: time.monotonic() when the answer was sent
    at: float = 0.0
    #: the answer's body (a Status for errors), parsed
    response: Any = None
    #: what RBAC authorizes it as: the verbs checked, ``resource[/subresource]``, API group;
    #: empty verbs for a non-resource URL (discovery, /version)
    verbs: tuple[str, ...] = ()
    resource: str = ""
    api_group: str = ""
    namespace: str = ""

    @property
    def dry_run(self) -> bool:
        return "All" in self.query.get("dryRun", [])

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS

    def __repr__(self) -> str:
        query = "&".join(f"{k}={v}" for k, vs in self.query.items() for v in vs)
        return f"<{self.method} {self.path}{'?' + query if query else ''} -> {self.status}>"


@dataclass
class _Route:
    resource: Resource
    namespace: str | None  # None: all namespaces (collection) or a cluster-scoped resource
    name: str | None
    subresource: str


class _NotFoundPage(Exception):
    """A path no handler serves: the server answers ``404 page not found`` in plain text."""


def _route(path: str) -> _Route | dict[str, Any]:
    """A resource route, or the discovery document at ``path``."""
    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return resources.api_versions()
    if parts == ["apis"]:
        return resources.api_group_list()
    if parts and parts[0] == "api" and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts and parts[0] == "apis" and len(parts) >= 2:
        if len(parts) == 2:
            doc = resources.api_group(parts[1])
            if doc is None:
                raise _NotFoundPage(path)
            return doc
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise _NotFoundPage(path)
    if not rest:
        doc = resources.api_resource_list(group, version)
        if doc is None:
            raise _NotFoundPage(path)
        return doc
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = BY_PATH.get((group, version, rest[0]))
    if resource is None or len(rest) > 3:
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    if namespace is not None and not resource.namespaced:
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else ""
    return _Route(resource, namespace, name, sub)


def rbac_attributes(
    method: str,
    path: str,
    query: dict[str, list[str]],
    upgrade: str = "",
    minor: int = 32,
) -> tuple[tuple[str, ...], str, str, str]:
    """(verbs, resource[/subresource], API group, namespace) a real server of version 1.MINOR
    authorizes a request by; no verbs for a non-resource URL. A WebSocket upgrade of
    exec/attach is a GET, authorized as ``create`` from v1.31 on
    (AuthorizePodWebsocketUpgradeCreatePermission, on by default), as ``get`` before."""
    try:
        route = _route(path)
    except (ApiError, _NotFoundPage):
        return (), "", "", ""
    if isinstance(route, dict):
        return (), "", "", ""
    res = route.resource
    resource = res.plural + (f"/{route.subresource}" if route.subresource else "")
    if route.name is None:
        verb = {"GET": "list", "POST": "create", "DELETE": "deletecollection"}.get(method, "")
        if verb == "list" and query.get("watch", ["false"])[0] in ("true", "1"):
            verb = "watch"
    else:
        verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, "")  # fmt: skip
    verbs: tuple[str, ...] = (verb,) if verb else ()
    if upgrade == "websocket" and route.subresource in ("exec", "attach"):
        verbs = ("create",) if minor >= 31 else ("get",)
    return verbs, resource, res.group, route.namespace or ""


def _wants_table(accept: str) -> str | None:
    """The Table version the client asked for first in ``Accept``, if any."""
    for media in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in media.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return params.get("v", "v1")
    return None


def _acceptable(accept: str) -> bool:
    if not accept.strip():
        return True
    for media in accept.split(","):
        base = media.split(";")[0].strip()
        if base in ("application/json", "*/*", "application/*", "application/yaml"):
            return True
    return False


class _Handler(BaseHTTPRequestHandler):
    server: ApiServerDouble._Server
    protocol_version = "HTTP/1.1"
    timeout = 10
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def setup(self) -> None:
        self.request.do_handshake()  # in this request's thread, not the accept loop
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the double records requests itself

    def do_GET(self) -> None:
        if (self.headers.get("Upgrade") or "").lower() == "websocket":
            self._websocket()
            return
        self._handle("GET")

    def do_POST(self) -> None:
        if (self.headers.get("Upgrade") or "").upper().startswith("SPDY/"):
            self._spdy()
            return
        self._handle("POST")

    def _body(self) -> bytes:
        """The request's body: Content-Length bytes, or the chunks of a chunked one (kubectl
        sends `create --raw -f -` from its input so)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _stream_route(self) -> tuple[_Route, dict[str, list[str]]]:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            raise ApiError(401, "Unauthorized", "Unauthorized")
        route = _route(url.path)
        if (
            isinstance(route, dict)
            or route.resource.plural != "pods"
            or route.subresource not in ("exec", "attach")
            or route.name is None
            or route.namespace is None
        ):
            raise ApiError(400, "BadRequest", "Upgrade request required")
        return route, query

    def _record_stream(self, method: str, code: int, payload: Any, upgrade: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        minor = int(self.server.double.server_version.get("minor", "32").rstrip("+") or 32)
        verbs, resource, group, namespace = rbac_attributes(method, url.path, query, upgrade, minor)
        self.server.double._record(
            RecordedRequest(
                method, url.path, query, "", None, code, self.headers.get("User-Agent") or "",
                time.monotonic(), payload, verbs, resource, group, namespace,
            )
        )  # fmt: skip

    def _answer_status(self, err: ApiError) -> None:
        data = json.dumps(err.status()).encode()
        self.send_response(err.code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _spdy(self) -> None:
        """exec over SPDY/3.1 (tests/k8s/spdy.py), as kubectl sends it when WebSockets are off
        or were refused."""
        double = self.server.double
        offered = [
            p.strip()
            for value in self.headers.get_all("X-Stream-Protocol-Version") or []
            for p in value.split(",")
        ]
        try:
            route, query = self._stream_route()
            if route.subresource != "exec":
                raise ApiError(400, "BadRequest", "this double serves attach over WebSocket only")
            if spdy.PROTOCOL not in offered:
                raise ApiError(403, "Forbidden", f"unable to upgrade: no common protocol in "
                               f"{offered}")  # fmt: skip
            assert route.name is not None and route.namespace is not None
            pod = double.state.read(route.resource, route.namespace, route.name)
            node = double.node_of(pod, (query.get("container") or [""])[0])
        except ApiError as err:
            self._record_stream("POST", err.code, err.status(), "spdy")
            self._answer_status(err)
            return
        self.send_response(101, "Switching Protocols")
        self.send_header("Connection", "Upgrade")
        self.send_header("Upgrade", "SPDY/3.1")
        self.send_header("X-Stream-Protocol-Version", spdy.PROTOCOL)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self._record_stream("POST", 101, None, "spdy")
        argv = query.get("command") or []
        double.exec_started(route.namespace, route.name, argv)
        stdin = (query.get("stdin") or ["false"])[0] in ("true", "1")
        conn = spdy.SpdyConnection(self.rfile, self.connection)
        spdy.serve_exec(conn, argv, node, stdin=stdin)

    def _websocket(self) -> None:
        """exec/attach over WebSocket (tests/k8s/streams.py)."""
        double = self.server.double
        try:
            route, query = self._stream_route()
            offered = self.headers.get("Sec-WebSocket-Protocol") or ""
            protocol = streams.choose_protocol(offered, double.websocket_protocols)
            if protocol is None:
                raise ApiError(400, "BadRequest", "unable to upgrade connection: no channel "
                               "protocol offered that this server speaks")  # fmt: skip
            assert route.name is not None and route.namespace is not None
            pod = double.state.read(route.resource, route.namespace, route.name)
            node = double.node_of(pod, (query.get("container") or [""])[0])
        except ApiError as err:
            self._record_stream("GET", err.code, err.status(), "websocket")
            self._answer_status(err)
            return
        key = self.headers.get("Sec-WebSocket-Key") or ""
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", streams.accept_key(key))
        self.send_header("Sec-WebSocket-Protocol", protocol)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self._record_stream("GET", 101, None, "websocket")
        ws = streams.WebSocket(self.rfile, self.connection)
        name, namespace = route.name, route.namespace
        if route.subresource == "attach":
            streams.serve_attach(ws, lambda: double.state.get("pods", name, namespace) is None)
            return
        argv = query.get("command") or []
        stdin = (query.get("stdin") or ["false"])[0] in ("true", "1")
        double.exec_started(namespace, name, argv)
        streams.serve_exec(ws, protocol, argv, node, stdin=stdin)

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        raw = self._body()
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        body: Any = None
        code, payload, text = 500, None, ""
        try:
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError as exc:
                    body = raw.decode("utf-8", "replace")
                    raise bad_request(
                        f"the body of the request could not be decoded: {exc}"
                    ) from exc
            code, payload = self._dispatch(method, url.path, query, content_type, body)
        except _NotFoundPage:
            code, text = 404, "404 page not found\n"
        except SelectorSyntaxError as exc:
            err = bad_request(str(exc))
            code, payload = err.code, err.status()
        except ApiError as exc:
            code, payload = exc.code, exc.status()
        except Exception as exc:  # a bug in the double: answer 500 and record it
            err = ApiError(500, "InternalError", f"Internal error occurred: {exc!r}")
            code, payload = 500, err.status()
            self.server.double.errors.append(repr(exc))
        verbs, resource, group, namespace = rbac_attributes(method, url.path, query)
        self.server.double._record(
            RecordedRequest(
                method,
                url.path,
                query,
                content_type,
                body,
                code,
                self.headers.get("User-Agent") or "",
                time.monotonic(),
                payload if not isinstance(payload, str) else None,
                verbs,
                resource,
                group,
                namespace,
            )
        )
        if isinstance(payload, str):
            payload, text = None, payload
        if payload is not None:
            data = json.dumps(payload).encode()
            ctype = "application/json"
        else:
            data = text.encode()
            ctype = "text/plain; charset=utf-8"
        self.send_response(code)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", ctype)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        content_type: str,
        body: Any,
    ) -> tuple[int, Any]:
        if path in ("/healthz", "/livez", "/readyz") and method == "GET":
            return 200, "ok"
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            raise ApiError(401, "Unauthorized", "Unauthorized")
        accept = self.headers.get("Accept") or ""
        if not _acceptable(accept) and _wants_table(accept) is None:
            raise ApiError(
                406,
                "NotAcceptable",
                "only the following media types are accepted: application/json, application/yaml",
            )
        if path == "/version":
            return 200, dict(self.server.double.server_version)
        if path.startswith("/openapi/"):
            raise _NotFoundPage(path)
        route = _route(path)
        if isinstance(route, dict):
            if method != "GET":
                raise _method_not_allowed(method)
            return 200, route
        if query.get("watch", ["false"])[0] in ("true", "1"):
            raise ApiError(405, "MethodNotAllowed", "watch is not supported by this server")
        dry_values = query.get("dryRun", [])
        if any(v != "All" for v in dry_values):
            raise bad_request(f"Invalid dry run value: {dry_values}")
        dry_run = bool(dry_values)
        state: ClusterState = self.server.double.state
        res, ns, name, sub = route.resource, route.namespace, route.name, route.subresource
        scoped_ns = ns or ""
        if res.namespaced and name is not None and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if sub in ("exec", "attach") and res.plural == "pods":
            raise bad_request("Upgrade request required")
        if sub and sub not in ("status", "eviction"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if sub == "eviction" and res.plural != "pods":
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if name is None:
            if method == "GET":
                items = state.list(
                    res,
                    ns if res.namespaced else None,
                    (query.get("labelSelector") or [None])[0],
                    (query.get("fieldSelector") or [None])[0],
                )
                version = _wants_table(accept)
                if version:
                    doc = resources.table(
                        res,
                        items,
                        state.resource_version,
                        (query.get("includeObject") or ["Metadata"])[0],
                    )
                    doc["apiVersion"] = f"meta.k8s.io/{version}"
                    return 200, doc
                for item in items:
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                return 200, {
                    "kind": f"{res.kind}List",
                    "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": state.resource_version},
                    "items": items,
                }
            if method == "POST":
                if res.namespaced and ns is None:
                    raise _method_not_allowed(method)
                return 201, state.create(res, scoped_ns, body, dry_run)
            raise _method_not_allowed(method)
        if sub == "eviction":
            if method != "POST":
                raise _method_not_allowed(method)
            return 201, state.evict(scoped_ns, name, body, dry_run)
        if method == "GET":
            obj = state.read(res, scoped_ns, name)
            version = _wants_table(accept)
            if version:
                doc = resources.table(
                    res,
                    [obj],
                    state.resource_version,
                    (query.get("includeObject") or ["Metadata"])[0],
                )
                doc["apiVersion"] = f"meta.k8s.io/{version}"
                return 200, doc
            return 200, obj
        if method == "PUT":
            return 200, state.replace(res, scoped_ns, name, body, dry_run, sub)
        if method == "PATCH":
            return 200, state.patch(res, scoped_ns, name, content_type, body, dry_run, sub)
        if method == "DELETE" and not sub:
            return 200, state.delete(res, scoped_ns, name, body, dry_run)
        raise _method_not_allowed(method)


def _method_not_allowed(method: str) -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({method})",
        {},
    )


class ApiServerDouble:
    """The running double: ``url``, ``state``, ``requests`` (a copy of the log), ``stop()``."""

    class _Server(ThreadingHTTPServer):
        daemon_threads = True
        double: ApiServerDouble
        ssl_context: ssl.SSLContext

        def get_request(self) -> tuple[Any, Any]:
            sock, addr = super().get_request()
            wrapped = self.ssl_context.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
            return wrapped, addr

        def handle_error(self, request: Any, client_address: Any) -> None:
            # a client that hangs up mid-handshake or mid-request: not the double's failure
            pass

    def __init__(self, seed: list[Path] | None = None, *, start_delay: float = 0.3) -> None:
        #: the test hosts standing for nodes (attach_node), by node name
        self.nodes: dict[str, streams.Node] = {}
        #: what /version answers (the machine's kubectl is a dispatcher that runs the kubectl
        #: of the server's minor version)
        self.server_version: dict[str, str] = dict(resources.SERVER_VERSION)
        #: the WebSocket channel protocols served (a v1.29 server: v4 only, and kubectl 1.32,
        #: which offers v5 alone, falls back to SPDY)
        self.websocket_protocols: tuple[str, ...] = streams.PROTOCOLS
        #: seconds a pod created on an attached node stays Pending
        self.start_delay = start_delay
        #: images whose pull fails (their pods stay Pending, ErrImagePull)
        self.unpullable: set[str] = set()
        #: (namespace, pod, argv) of every exec, in order
        self.execs: list[tuple[str, str, list[str]]] = []
        self._kubelet_stop = threading.Event()
        self._seen: dict[str, float] = {}
        self.state = ClusterState()
        self.state.load(seed if seed is not None else [FIXTURES / f for f in DEFAULT_SEED])
        self.errors: list[str] = []
        self._log: list[RecordedRequest] = []
        self._log_lock = threading.Lock()
        self._certs_dir = Path(tempfile.mkdtemp(prefix="k8s-api-double-"))
        cert = make_serving_cert(self._certs_dir)
        self.ca_pem = cert.ca_pem
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert.cert_file, cert.key_file)
        context.set_alpn_protocols(["http/1.1"])
        self._server = self._Server(("127.0.0.1", 0), _Handler)
        self._server.ssl_context = context
        self._server.double = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="k8s-api-double",
            daemon=True,
        )
        self._thread.start()
        self.port = self._server.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self._kubelet = threading.Thread(target=self._kubelets, name="kubelet", daemon=True)
        self._kubelet.start()

    # ---- nodes: test hosts that run what is exec'd in their pods

    def attach_node(self, name: str, host: Any, network: Any) -> None:
        """The SSH test host `host` (of `network`) stands for node `name`: commands exec'd in
        pods bound to it run there, and pods created on it start."""
        self.nodes[name] = streams.Node(name, host, network)

    def node_of(self, pod: dict[str, Any], container: str) -> streams.Node:
        """The node an exec into `pod` runs on; an ApiError as a real server answers when
        the pod cannot be exec'd into."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        names = [c.get("name") for c in spec.get("containers") or []]
        if container and container not in names:
            raise ApiError(400, "BadRequest", f'container {container} is not valid for pod '
                           f'{meta["name"]}')  # fmt: skip
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            raise bad_request(f"cannot exec into a container in a completed pod; current "
                              f"phase is {phase}")  # fmt: skip
        node = self.nodes.get(spec.get("nodeName") or "")
        if phase != "Running" or node is None:
            raise bad_request(
                f'unable to upgrade connection: container not found ("{container or names[0]}")'
            )
        return node

    def exec_started(self, namespace: str, pod: str, argv: list[str]) -> None:
        with self._log_lock:
            self.execs.append((namespace, pod, list(argv)))

    def _kubelets(self) -> None:
        """Pods bound to an attached node go from Pending to Running after start_delay (an
        image in `unpullable` leaves them Pending, waiting in ErrImagePull)."""
        while not self._kubelet_stop.wait(0.05):
            if not self.nodes:
                continue
            for pod in self.state.pending_pods():
                self._start(pod)

    def _start(self, pod: dict[str, Any]) -> None:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if status.get("phase") != "Pending" or spec.get("nodeName") not in self.nodes:
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
        now = time.monotonic()
        first = self._seen.setdefault(uid, now)
        if now - first < self.start_delay:
            return
        containers = spec.get("containers") or []
        bad = [c for c in containers if c.get("image") in self.unpullable]
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if bad:
            pod["status"] = {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{
                    "name": c["name"], "image": c.get("image"), "ready": False,
                    "restartCount": 0, "started": False,
                    "state": {"waiting": {"reason": "ErrImagePull",
                                          "message": f'failed to pull image "{c.get("image")}"'}},
                } for c in containers],
            }  # fmt: skip
            self._seen[uid] = float("inf")
            self.state.set_pod_status(pod)
            return
        pod["status"] = {
            "phase": "Running",
            "hostIP": "10.213.0.1",
            "podIP": "10.213.0.1",
            "startTime": started,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": started}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [{
                "name": c["name"], "image": c.get("image"), "imageID": "", "ready": True,
                "restartCount": 0, "started": True,
                "state": {"running": {"startedAt": started}},
                "containerID": "containerd://" + uuid.uuid4().hex,
            } for c in containers],
        }  # fmt: skip
        self.state.set_pod_status(pod)

    def _record(self, request: RecordedRequest) -> None:
        with self._log_lock:
            self._log.append(request)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._log_lock:
            return list(self._log)

    def writes(self, *, include_dry_run: bool = True) -> list[RecordedRequest]:
        """The requests that asked to change something (POST/PUT/PATCH/DELETE)."""
        return [r for r in self.requests if r.is_write and (include_dry_run or not r.dry_run)]

    def clear_log(self) -> None:
        with self._log_lock:
            self._log.clear()

    def write_kubeconfig(self, path: Path, context: str = "api-double") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "api-double",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "api-double-admin", "user": {"token": TOKEN}}],
            "contexts": [
                {
                    "name": context,
                    "context": {
                        "cluster": "api-double",
                        "user": "api-double-admin",
                        "namespace": "default",
                    },
                }
            ],
            "current-context": context,
            "preferences": {},
        }
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def stop(self) -> None:
        self._kubelet_stop.set()
        for node in self.nodes.values():
            node.close()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        shutil.rmtree(self._certs_dir, ignore_errors=True)
