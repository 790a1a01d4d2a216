"""OpenAPI generation: the shared AutoSchema and the post-processing hooks (SPEC §2).

`ApiAutoSchema` (every DRF view's schema class) expresses anonymous reads in `security`; the hooks add
SPEC §2's error object to every error status the server really sends, the `Request-Id` header of every
response, and `additionalProperties: false` to strict request bodies, and make nullable references
accept null under OpenAPI 3.0.3.
"""

from __future__ import annotations

import json
from http import HTTPStatus

from drf_spectacular.openapi import AutoSchema


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema plus the anonymous alternative `{}` in `security` for safe methods of
    views with ``allow_anonymous_reads = True`` (`accounts.permissions.ScopedAccess` lets those through;
    a store the anonymous caller cannot read is then a 404, identical to a missing one)."""

    def get_operation(self, *args, **kwargs):
        """drf-spectacular's operation, plus `Idempotency-Key` and `Idempotent-Replayed` for a create
        decorated with `accounts.idempotency.replayable`."""
        operation = super().get_operation(*args, **kwargs)
        handler = getattr(self.view, self.method.lower(), None)
        if operation is not None and getattr(handler, "replayable", False):
            add_replay(operation)
        return operation

    def get_auth(self):
        auth = super().get_auth()
        anonymous = getattr(self.view, "allow_anonymous_reads", False) and self.method in ("GET", "HEAD")
        if anonymous and {} not in auth:
            auth = [*auth, {}]
        return auth


ERROR_SCHEMA = {
    "type": "object",
    "required": ["type", "error", "request_id"],
    "properties": {
        "type": {"type": "string", "enum": ["error"]},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object", "additionalProperties": True},
            },
            "additionalProperties": True,
        },
        "request_id": {"type": "string"},
    },
}

_DESCRIPTIONS = {
    "400": "Invalid request (invalid_request_error).",
    "401": "Missing or invalid token (authentication_error).",
    "403": "Missing scope or right (permission_error).",
    "404": "Not found, or not readable by the caller (not_found_error).",
    "409": "Conflict (conflict_error with details.reason, or a memory_* error).",
    "406": "No acceptable representation for the `Accept` header (invalid_request_error).",
    "413": "Request body too large (request_too_large).",
    "408": "The request's headers or body did not arrive in time (invalid_request_error), answered by the HTTP "
    "layer; the connection is closed.",
    "414": "Request line (path and query) over 8 KiB (invalid_request_error), answered by the HTTP layer.",
    "431": "Too many request headers, or one over 8 KiB (invalid_request_error), answered by the HTTP layer.",
    "415": "Request body is not `application/json`, or is in a content coding (a `Content-Encoding` other than "
    "identity: bodies are never decoded) (invalid_request_error).",
    "503": "Database unavailable or overloaded (overloaded_error); retry after `Retry-After` seconds.",
}

# The security scheme of per-work credentials (sessions/api/schema.py): an operation that accepts them
# answers 409 lease_expired to one whose lease has ended, whatever its method (docs/agent-access.md).
WORK_CREDENTIAL_SCHEME = "workCredential"
_LEASE_EXPIRED = (
    "With a per-work credential whose claim or lease has ended (conflict_error, details.reason "
    "`lease_expired`; reads too, SPEC §5)."
)

REQUEST_ID_HEADER = {
    "description": "The request's id (`req_…`), also in every error body; quote it when reporting a problem.",
    "required": True,
    "schema": {"type": "string", "pattern": "^req_[0-9a-f]{24}$"},
}
NO_RETRY_HEADER = {
    "description": "`false` on 409 and 412: the anthropic SDK must not retry (SPEC §5).",
    "schema": {"type": "string", "enum": ["false"]},
}
RETRY_AFTER_HEADER = {
    "description": "Whole seconds to wait before retrying.",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}


IDEMPOTENCY_KEY_PARAMETER = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "description": "Makes a retry of this create safe: the first 2xx answer under the key is stored for 24 hours "
    "and a request with the same key and the same method, path, query and body gets it again (with "
    "`Idempotent-Replayed: true`) instead of a second object; a request with the same key while the first runs "
    "waits for it. The same key with another request: 409 `idempotency_key_reused`. Keys are per API token; a "
    "refused request stores nothing. Send a fresh key (a UUID) per new create.",
}
REPLAYED_HEADER = {
    "description": "`true` when this answer is a replay of the first answer given under the request's "
    "`Idempotency-Key` (nothing was created again).",
    "schema": {"type": "string", "enum": ["true"]},
}


def add_replay(operation: dict) -> None:
    """Document `Idempotency-Key` replay (`accounts.idempotency`) on one create operation: the header
    parameter and the `Idempotent-Replayed` header of its 2xx answers."""
    from accounts.idempotency import KEY_MAX_CHARS

    parameter = {**IDEMPOTENCY_KEY_PARAMETER, "schema": {"type": "string", "minLength": 1, "maxLength": KEY_MAX_CHARS}}
    operation.setdefault("parameters", []).append(parameter)
    for status, response in operation.get("responses", {}).items():
        if status.startswith("2"):
            response.setdefault("headers", {})["Idempotent-Replayed"] = REPLAYED_HEADER


def add_error_responses(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOK: add the `Error` component and error responses to each operation."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            wanted = ["400", "401", "403", "404", "406", "408", "413", "414", "431", "503"]
            if method in {"post", "patch", "put", "delete"}:
                wanted += ["409", "415"]
            for status in wanted:
                content = {"application/json": {"schema": ref}}
                responses.setdefault(status, {"description": _DESCRIPTIONS[status], "content": content})
            if any(WORK_CREDENTIAL_SCHEME in requirement for requirement in operation.get("security", [])):
                # every request made with a per-work credential whose lease has ended, reads included
                content = {"application/json": {"schema": ref}}
                responses.setdefault("409", {"description": _LEASE_EXPIRED, "content": content})
            for status, response in responses.items():
                if status[0] in "45" and "content" not in response:  # a view declared it by its description
                    response["content"] = {"application/json": {"schema": ref}}
                headers = response.setdefault("headers", {})
                headers.setdefault("Request-Id", REQUEST_ID_HEADER)
                if status in ("409", "412"):
                    headers.setdefault("x-should-retry", NO_RETRY_HEADER)
                if status in ("429", "503"):
                    headers.setdefault("Retry-After", RETRY_AFTER_HEADER)
    return result


def close_strict_bodies(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOK: strict request bodies (`StrictSerializer`) get
    `additionalProperties: false`, since the server answers 400 to any key they do not list."""
    from config.api import strict_component_names

    strict = strict_component_names()
    for name, schema in result.get("components", {}).get("schemas", {}).items():
        if name in strict and schema.get("type") == "object":
            schema["additionalProperties"] = False
    return result


NULL_ENUM = "NullEnum"


def accept_null_references(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOK: a nullable reference accepts null under OpenAPI 3.0.3.

    drf-spectacular writes a nullable nested object as ``{allOf: [{$ref: X}], nullable: true}``; OpenAPI
    3.0.3 lets `nullable` add null only to a `type` in the same object, and `allOf` still requires X, so a
    validator that follows the specification refuses the null the server sends (``NapData.job``,
    ``Import.store``, ``MemoryVersion.redacted_by``, the empty work poll, …). They become
    ``{oneOf: [{$ref: X}, {$ref: NullEnum}], nullable: true}`` — the form drf-spectacular itself gives
    nullable choice fields, ``NullEnum`` being ``{enum: [null]}``.
    """
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    null = {"$ref": f"#/components/schemas/{NULL_ENUM}"}
    found = False

    def visit(node):
        nonlocal found
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        if not isinstance(node, dict):
            return
        only = node.get("allOf")
        if node.get("nullable") is True and "type" not in node and isinstance(only, list) and len(only) == 1:
            node["oneOf"] = [node.pop("allOf")[0], null]
            found = True
        for value in node.values():
            visit(value)

    visit(result.get("paths", {}))
    visit(schemas)
    if found:
        schemas.setdefault(NULL_ENUM, {"enum": [None]})
    return result


def _probe(operation_id: str, summary: str, status_body: str, *, unready: bool) -> dict:
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    ids = {"Request-Id": REQUEST_ID_HEADER}
    responses = {
        "200": {
            "description": summary,
            "headers": ids,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["status"],
                        "properties": {"status": {"type": "string", "enum": [status_body]}},
                        "additionalProperties": False,
                    }
                }
            },
        },
        # the front's screening of every request: a NUL in the query, a URL or headers too large
        "400": {"description": _DESCRIPTIONS["400"], "headers": ids, "content": error},
        "414": {"description": _DESCRIPTIONS["414"], "headers": ids, "content": error},
        "431": {"description": _DESCRIPTIONS["431"], "headers": ids, "content": error},
    }
    if unready:
        responses["503"] = {
            "description": "The database is unreachable or did not answer within 1.5 s (overloaded_error).",
            "headers": {**ids, "Retry-After": RETRY_AFTER_HEADER},
            "content": error,
        }
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["probes"],
            "security": [{}],
            "responses": responses,
        }
    }


# The probes (config.health, answered by the front without a Django thread): plain views, outside DRF.
PROBES = {
    "/healthz": _probe("healthz", "Liveness: the server answers (it never touches the database).", "ok", unready=False),
    "/readyz": _probe("readyz", "Readiness: the database answered a `SELECT 1` within 1.5 s.", "ready", unready=True),
}


def describe_probes(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOK: `GET /healthz` and `GET /readyz`, plain Django views the
    generator does not see, described as they answer (no credentials; 200 `{"status": …}`, /readyz's 503
    with `Retry-After`, and the front's 400/414/431)."""
    result.setdefault("paths", {}).update(json.loads(json.dumps(PROBES)))
    return result


# Names of shared error responses that are not their status's most common one (`share_error_responses`).
_VARIANT_NAMES = {_LEASE_EXPIRED: "LeaseExpired"}


def share_error_responses(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOK, the last one: an error response that two or more operations
    declare identically is written once, under `components/responses`, and referenced (`$ref`).

    About a thousand error responses are 18 distinct ones; written out in each operation they were two thirds
    of an 850 KB document (a tester). Each is named after its status (`NotFound`, `ServiceUnavailable`); a
    status with several shared variants names its most common one so, the others by `_VARIANT_NAMES` or a
    number. Deterministic: the same views give the same document.
    """
    uses: dict[str, dict[str, list]] = {}
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict):
                continue
            for status, response in operation.get("responses", {}).items():
                if status[0] in "45" and "$ref" not in response:
                    key = json.dumps(response, sort_keys=True)
                    uses.setdefault(status, {}).setdefault(key, []).append((operation["responses"], status))
    shared = result.setdefault("components", {}).setdefault("responses", {})
    for status in sorted(uses):
        variants = sorted(uses[status].items(), key=lambda item: (-len(item[1]), item[0]))
        base = HTTPStatus(int(status)).phrase.title().replace(" ", "").replace("-", "")
        for index, (key, places) in enumerate(variants):
            if len(places) < 2:
                continue
            response = json.loads(key)
            name = base if index == 0 else _VARIANT_NAMES.get(response.get("description"), f"{base}{index + 1}")
            shared[name] = response
            for responses, code in places:
                responses[code] = {"$ref": f"#/components/responses/{name}"}
    return result
