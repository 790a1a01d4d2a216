"""MCP tools as REST operations by another name (SPEC §4 tool names, §8 `/mcp`).

A tool is declared once, in its app's ``mcp.py`` (`stores/mcp.py`, `memories/mcp.py`), as a `Tool` whose
name is the **operationId** of one REST operation. Everything else is derived from that operation, so a
change to a REST serializer, limit or view flows into MCP without a second edit:

- the input schema is the operation's path parameters (the store's ``id``), query parameters and JSON
  body fields, with their types, limits and descriptions, taken from the OpenAPI document drf-spectacular
  builds from the serializers (converted to plain JSON Schema, references inlined);
- the output schema is the operation's success response (the ``{data, meta}`` envelope);
- a call is dispatched **to the REST view itself**, in-process: the arguments become the path, the query
  string and the JSON body of an internal request made for the caller the `/mcp` request authenticated
  (its user and token) and carrying the outer request's id. The view is the one the operation's path
  template routes to, bound once; path arguments are handed to it as its URL arguments, never routed,
  so no value (``resolve``, ``imports``, ``x/readers``) can reach another operation, and the view parses
  them as it parses a REST path (an id that names no store is its "Store not found."). The view checks
  scopes, fetches through the selectors, validates with the strict serializers, calls the one service
  and renders — the only implementation of every rule — and its response body is the tool's result (or,
  for a 4xx/5xx, the SPEC §2 error object).

What MCP adds in front of the view is only what the HTTP encoding would otherwise lose: JSON types are
checked strictly (``"true"``, ``"5"`` where a boolean or integer belongs are errors, never coerced — a
query string could not tell them apart), unknown arguments are rejected, and NUL characters and lone
surrogates are refused (naming the argument) before anything is encoded. Those errors go through
`config.errors.describe`, like every other error.
"""

from __future__ import annotations

import copy
import importlib
import io
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest
from django.urls import Resolver404, ResolverMatch, resolve
from rest_framework import serializers

from config.api import json_types_in_words, unknown_fields
from config.errors import describe, error_payload, request_id_of
from config.fields import json_type_of, not_a
from config.parsers import find_forbidden, forbidden_refusal

logger = logging.getLogger("memories.mcp")

# The apps whose ``mcp.py`` declares tools, in the order tools/list shows them (SPEC §4's table).
TOOL_MODULES = ("stores.mcp", "memories.mcp")

# OpenAPI keywords that mean nothing to a JSON Schema validator, or describe the wrong direction.
_DROPPED_KEYWORDS = frozenset({"readOnly", "writeOnly", "nullable", "example", "externalDocs", "xml", "discriminator"})


@dataclass(frozen=True)
class Tool:
    """One MCP tool, declared in an app's ``mcp.py``; `name` is the operationId of its REST operation.

    title/description: what an LLM reads to decide when and how to call it (say what the result means and
    which tool comes next). read_only/destructive/idempotent: the MCP tool annotations (hints for hosts,
    e.g. whether to ask the user first). argument_help: extra descriptions per argument, appended to the
    one the serializer's ``help_text`` gives.
    """

    name: str
    title: str
    description: str
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    argument_help: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Operation:
    """A `Tool` bound to its REST operation: how to call it and what it takes and returns.

    path: the OpenAPI path template (``/api/v1/memories/{id}/note``); path_params, query_params and
    body_fields partition the tool's arguments; input_schema / output_schema are JSON Schema objects.
    route: what the path template itself resolves to — the operation's view, with each URL argument's
    value the placeholder (``{"pk": "{id}"}``) of the path parameter that fills it.
    """

    tool: Tool
    method: str
    path: str
    path_params: tuple[str, ...]
    query_params: tuple[str, ...]
    body_fields: tuple[str, ...]
    has_body: bool
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    route: ResolverMatch


@dataclass(frozen=True)
class ToolReply:
    """The outcome of one call: the REST status, the response body as text and parsed.

    ok: a 2xx answer (`data` is then the ``{data, meta}`` envelope); otherwise `data` is the SPEC §2
    error object, ``request_id`` included.
    """

    status: int
    text: str
    data: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


# ---------------------------------------------------------------------------------------- catalogue


def declared_tools() -> list[Tool]:
    """Every tool of `TOOL_MODULES`, in order (each module lists its tools in ``TOOLS``)."""
    tools: list[Tool] = []
    for module in TOOL_MODULES:
        tools.extend(importlib.import_module(module).TOOLS)
    return tools


_catalogue: dict[str, Operation] | None = None
_catalogue_lock = threading.Lock()


def catalogue() -> dict[str, Operation]:
    """Tool name → `Operation`, built once per process from the OpenAPI document (about 0.2 s).

    Raises LookupError at the first call when a declared tool names no REST operation (a renamed
    operationId must fail loudly, not drop a tool).
    """
    global _catalogue
    if _catalogue is None:
        with _catalogue_lock:
            if _catalogue is None:
                _catalogue = build_catalogue(declared_tools(), openapi_document())
    return _catalogue


def openapi_document() -> dict[str, Any]:
    """The service's OpenAPI document, as `/openapi.yaml` serves it (drf-spectacular, OpenAPI 3.0)."""
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def build_catalogue(tools: list[Tool], document: dict[str, Any]) -> dict[str, Operation]:
    """Bind each tool to the operation whose operationId is its name (see `Operation`)."""
    operations: dict[str, tuple[str, str, dict]] = {}
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            if isinstance(operation, dict) and "operationId" in operation:
                operations[operation["operationId"]] = (method.upper(), path, operation)
    components = document.get("components", {}).get("schemas", {})
    bound: dict[str, Operation] = {}
    for tool in tools:
        if tool.name not in operations:
            raise LookupError(f"MCP tool {tool.name!r} names no REST operation (operationId) in the OpenAPI document.")
        method, path, operation = operations[tool.name]
        bound[tool.name] = _bind(tool, method, path, operation, components)
    return bound


def _bind(tool: Tool, method: str, path: str, operation: dict, components: dict) -> Operation:
    properties: dict[str, Any] = {}
    required: list[str] = []
    path_params: list[str] = []
    query_params: list[str] = []
    parameters = operation.get("parameters", [])
    # Path parameters first (the store's `id`), then required query parameters, then the rest.
    for parameter in sorted(parameters, key=lambda p: (p["in"] != "path", not p.get("required"))):
        name = parameter["name"]
        if parameter["in"] == "path":
            if "{" + name + "}" not in path:
                continue  # documented but not in the template: nothing to fill in
            path_params.append(name)
        elif parameter["in"] == "query":
            query_params.append(name)
        else:
            continue
        schema = json_schema(parameter.get("schema", {}), components)
        if parameter.get("description") and "description" not in schema:
            schema["description"] = parameter["description"]
        properties[name] = schema
        if parameter.get("required"):
            required.append(name)
    body_fields: list[str] = []
    content = operation.get("requestBody", {}).get("content", {})
    has_body = "application/json" in content
    if has_body:
        body = json_schema(content["application/json"]["schema"], components)
        for name, schema in body.get("properties", {}).items():
            if name in properties:
                raise LookupError(f"MCP tool {tool.name!r}: {name!r} is both a parameter and a body field.")
            body_fields.append(name)
            properties[name] = schema
        required.extend(body.get("required", []))
    for name, extra in tool.argument_help.items():
        if name not in properties:
            raise LookupError(f"MCP tool {tool.name!r}: argument_help names unknown argument {name!r}.")
        known = properties[name].get("description", "")
        properties[name]["description"] = f"{known} {extra}".strip()
    input_schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        input_schema["required"] = sorted(set(required), key=list(properties).index)
    return Operation(
        tool=tool,
        method=method,
        path=path,
        path_params=tuple(path_params),
        query_params=tuple(query_params),
        body_fields=tuple(body_fields),
        has_body=has_body,
        input_schema=input_schema,
        output_schema=_output_schema(tool, operation, components),
        route=_route(tool, path, path_params),
    )


def _route(tool: Tool, path: str, path_params: list[str]) -> ResolverMatch:
    """Resolve the path template itself: each ``{name}`` lands, as text, in the URL argument it fills."""
    try:
        match = resolve(path)
    except Resolver404:
        raise LookupError(f"MCP tool {tool.name!r}: its path {path} routes to no view.") from None
    placeholders = {"{" + name + "}" for name in path_params}
    if set(match.kwargs.values()) != placeholders or match.args:
        raise LookupError(f"MCP tool {tool.name!r}: {path} does not route its parameters to one view's arguments.")
    return match


def _output_schema(tool: Tool, operation: dict, components: dict) -> dict[str, Any]:
    for status in sorted(operation.get("responses", {})):
        if status.startswith("2"):
            content = operation["responses"][status].get("content", {})
            if "application/json" in content:
                schema = json_schema(content["application/json"]["schema"], components)
                if schema.get("type") == "object":
                    return schema
    raise LookupError(f"MCP tool {tool.name!r}: its REST operation documents no JSON object success response.")


def json_schema(schema: Any, components: Mapping[str, Any]) -> Any:
    """Turn an OpenAPI 3.0 schema into a self-contained JSON Schema (2020-12) value.

    ``$ref`` to ``#/components/schemas/X`` is inlined; ``allOf: [one]`` plus siblings is merged, and so is
    ``oneOf: [one, NullEnum]`` (how the document writes a nullable reference or choice, `config.schema`);
    ``nullable: true`` becomes a ``"null"`` type (and a null in an ``enum``), or an ``anyOf`` with
    ``{"type": "null"}``;
    readOnly/writeOnly and other OpenAPI-only keywords are dropped. Raises ValueError on a reference
    cycle (none of our serializers nest themselves).
    """
    return _convert(schema, components, ())


def _convert(schema: Any, components: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(schema, list):
        return [_convert(item, components, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"Schema reference cycle through {name!r}.")
        target = _convert(copy.deepcopy(components[name]), components, (*seen, name))
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        return _merge(target, _convert(siblings, components, seen)) if siblings else target
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED_KEYWORDS:
            continue
        if key == "properties":
            out[key] = {name: _convert(item, components, seen) for name, item in value.items()}
        else:
            out[key] = _convert(value, components, seen)
    if isinstance(out.get("allOf"), list) and len(out["allOf"]) == 1:
        only = out.pop("allOf")[0]
        out = _merge(only, out)
    alternatives = out.get("oneOf")
    if schema.get("nullable") and isinstance(alternatives, list) and len(alternatives) == 2 and _NULL in alternatives:
        out.pop("oneOf")
        out = _merge(next(a for a in alternatives if a != _NULL), out)  # `nullable` below adds the null
    if schema.get("nullable"):
        out = _nullable(out)
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    merged.update(extra)
    return merged


_NULL = {"enum": [None]}  # config.schema.NULL_ENUM, inlined


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema = {**schema, "enum": [*schema["enum"], None]}
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list):
        return {**schema, "type": [*kind, "null"] if "null" not in kind else kind}
    description = schema.get("description")
    body = {k: v for k, v in schema.items() if k != "description"}
    wrapped: dict[str, Any] = {"anyOf": [body, {"type": "null"}]}
    if description:
        wrapped["description"] = description
    return wrapped


# ----------------------------------------------------------------------------------- strict arguments


def _allowed_types(schema: Mapping[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return set(kind)
    for combinator in ("anyOf", "oneOf"):
        if isinstance(schema.get(combinator), list):
            kinds: set[str] = set()
            for option in schema[combinator]:
                sub = _allowed_types(option)
                if sub is None:
                    return None
                kinds |= sub
            return kinds
    return None


def check_arguments(operation: Operation, arguments: Any) -> dict[str, Any]:
    """Validate what only MCP can get wrong; return the arguments (a dict) unchanged.

    Raises InvalidRequest / DRF ValidationError (400 `invalid_request_error` naming the argument) for:
    arguments that are not an object, NUL characters or lone surrogates anywhere (PostgreSQL cannot store
    them; a query string cannot carry them), unknown arguments, a JSON type other than the schema's
    (strict: ``"true"`` is a string, ``1`` is not a boolean, ``5.0`` is not an integer), and a missing
    path parameter. Everything else — limits, formats, required fields — is the REST serializer's job.
    """
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise serializers.ValidationError({"arguments": ["Must be an object."]})
    found = find_forbidden(arguments)
    if found:
        name, message = forbidden_refusal(found)
        name = "arguments" if name == "body" else name  # find_forbidden calls the top level "body"
        raise serializers.ValidationError({name: [message]})
    properties = operation.input_schema["properties"]
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise unknown_fields(unknown)
    problems: dict[str, list[str]] = {}
    for name, value in arguments.items():
        allowed = _allowed_types(properties[name])
        if allowed is None:
            continue
        actual = json_type_of(value)
        if actual in allowed or (actual == "integer" and "number" in allowed):
            continue
        problems[name] = [not_a(json_types_in_words(allowed), value)]
    for name in operation.path_params:
        if name not in arguments and name not in problems:
            problems[name] = ["This field is required."]
    if problems:
        raise serializers.ValidationError(problems)
    return arguments


# ------------------------------------------------------------------------------------------ dispatch


def _query_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def rest_request(operation: Operation, arguments: dict[str, Any], *, outer: HttpRequest) -> WSGIRequest:
    """The internal request that performs `operation` with `arguments` for the caller of `outer`.

    Path parameters are percent-encoded into the path (`call` hands them to the view directly), query
    parameters form the query string (booleans as ``true``/``false``), body fields the JSON body. The
    caller (the user and token `/mcp` authenticated, else the Authorization header) and the outer
    request's id are carried over, so errors quote the request id of the HTTP response.
    """
    path = operation.path
    for name in operation.path_params:
        path = path.replace("{" + name + "}", quote(str(arguments[name]), safe=""))
    pairs = [(name, _query_text(arguments[name])) for name in operation.query_params if name in arguments]
    body = b""
    if operation.has_body:
        payload = {name: arguments[name] for name in operation.body_fields if name in arguments}
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    meta = outer.META
    environ = {
        "REQUEST_METHOD": operation.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,  # ASCII: every parameter was percent-encoded above
        "QUERY_STRING": urlencode(pairs, quote_via=quote),
        "SERVER_NAME": meta.get("SERVER_NAME", "localhost"),
        "SERVER_PORT": str(meta.get("SERVER_PORT", "80")),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": meta.get("REMOTE_ADDR", ""),
        "wsgi.url_scheme": outer.scheme or "http",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "HTTP_ACCEPT": "application/json",
    }
    for key in ("HTTP_HOST", "HTTP_AUTHORIZATION", "HTTP_USER_AGENT", "HTTP_X_FORWARDED_PROTO"):
        if key in meta:
            environ[key] = meta[key]
    inner = WSGIRequest(environ)
    inner.request_id = request_id_of(outer)
    credentials = getattr(outer, "mcp_credentials", None)
    if credentials is not None:
        # The token was authenticated for this HTTP request moments ago (config.mcp_server.endpoint):
        # hand the view that caller instead of looking the token up again. DRF's Request honours these
        # two attributes (its force_authenticate hook); DRF is pinned and tests cover it. Scopes and
        # store rights are still checked by the view, from this token.
        inner._force_auth_user, inner._force_auth_token = credentials
    return inner


def call(operation: Operation, arguments: Any, *, request: HttpRequest) -> ToolReply:
    """Run one tool call for the caller of `request` (the HTTP request to /mcp); never raises.

    Synchronous (it runs the REST view and so the database): call it from async code through
    ``sync_to_async``. A 2xx answer is the REST body; anything else is the SPEC §2 error object, with
    the request id of `request`. Where REST would send ``Retry-After`` (a 503: a database fault, a
    deadline, a busy store), the error object carries it as ``retry_after``, whole seconds: a tool
    result has no headers, and an agent should know the call is worth repeating and when.
    """
    try:
        checked = check_arguments(operation, arguments)
        inner = rest_request(operation, checked, outer=request)
        route = operation.route
        # The operation's own view, never a route looked up from the filled-in path: path arguments are
        # its URL arguments, the text a REST client's percent-encoded path segment decodes to (a string,
        # or an integer such as `seq`, whose JSON type check_arguments has checked).
        kwargs = {key: str(checked[placeholder[1:-1]]) for key, placeholder in route.kwargs.items()}
        inner.resolver_match = ResolverMatch(
            route.func, (), kwargs, url_name=route.url_name, app_names=route.app_names,
            namespaces=route.namespaces, route=route.route, captured_kwargs=kwargs,
        )  # fmt: skip
        response = route.func(inner, **kwargs)
        if hasattr(response, "render") and not getattr(response, "is_rendered", True):
            response.render()
        text = response.content.decode("utf-8")
        data = json.loads(text)
        retry_after = response.get("Retry-After")
        if retry_after is not None and isinstance(data, dict) and isinstance(data.get("error"), dict):
            data["error"]["retry_after"] = _seconds(retry_after)
            text = json.dumps(data, ensure_ascii=False)
        return ToolReply(status=response.status_code, text=text, data=data)
    except Exception as exc:  # every failure becomes the same error object REST would show
        return error_reply(exc, request=request, tool=operation.tool.name)


def error_reply(exc: BaseException, *, request: HttpRequest, tool: str = "") -> ToolReply:
    """The tool error for `exc`: the SPEC §2 error object REST would answer (`config.errors.describe`), with
    the request id of `request` and, where REST would send ``Retry-After``, ``retry_after`` (whole seconds).
    A 5xx is logged with its traceback, naming `tool`."""
    status, type_, message, details, extra, headers = describe(exc)
    if status >= 500:
        logger.exception("MCP tool %s failed", tool or "-", exc_info=exc)
    if "Retry-After" in headers:
        extra = {**(extra or {}), "retry_after": _seconds(headers["Retry-After"])}
    payload = error_payload(
        status=status, type=type_, message=message, request_id=request_id_of(request), details=details, extra=extra
    )
    return ToolReply(status=status, text=json.dumps(payload, ensure_ascii=False), data=payload)


def _seconds(retry_after: str) -> int:
    """A ``Retry-After`` header of ours (whole seconds) as the tool error's ``retry_after`` integer."""
    return int(retry_after) if retry_after.isdigit() else 1
