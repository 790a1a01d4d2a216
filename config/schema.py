"""OpenAPI post-processing: every operation documents SPEC §2's error object for its error statuses."""

from __future__ import annotations

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
    "413": "Request body too large (request_too_large).",
}


def add_error_responses(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOK: add the `Error` component and error responses to each operation."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            wanted = ["400", "401", "403", "404", "413"] if method != "get" else ["400", "401", "403", "404"]
            if method in {"post", "patch", "put", "delete"}:
                wanted.append("409")
            for status in wanted:
                responses.setdefault(
                    status, {"description": _DESCRIPTIONS[status], "content": {"application/json": {"schema": ref}}}
                )
    return result


def close_strict_bodies(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOK: strict request bodies (`StrictSerializer`) get
    `additionalProperties: false`, since the server answers 400 to any key they do not list."""
    from config.api import STRICT_COMPONENTS

    for name, schema in result.get("components", {}).get("schemas", {}).items():
        if name in STRICT_COMPONENTS and schema.get("type") == "object":
            schema["additionalProperties"] = False
    return result
