"""OpenAPI for the retired flat-record endpoints: deprecated operations whose only answer is 410 (SPEC §7)."""

from __future__ import annotations

import re

from drf_spectacular.openapi import AutoSchema

GONE_DESCRIPTION = (
    "Retired in contract 2.0.0 (migration 0041). Every method answers 410 `gone_error` with "
    '`details.guide_url`, the absolute URL of `/docs/memories`, and a `Link: <guide_url>; rel="help"` '
    "header, without looking at the token. The records now live as entries in each author's private "
    "Memories store."
)
# Statuses a retired operation can return: 410 always; 400 and 413 only from request screening
# (bad UTF-8 in the path, oversized body) that runs before any view; 408, 414 and 431 from the HTTP layer,
# which answers them before any route is known (a tester found them missing here).
RETIRED_STATUSES = {"400", "408", "410", "413", "414", "431"}


class RetiredEndpointSchema(AutoSchema):
    """Describe a retired route as a deprecated, unauthenticated operation with a 410 response."""

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        self.registry = registry
        self.path = path
        self.path_regex = path_regex
        self.path_prefix = path_prefix
        self.method = method.upper()
        slug = re.sub(r"[^a-z0-9]+", "_", path.removeprefix("/api/v1").lower()).strip("_")
        operation = {
            "operationId": f"retired_{slug}_{method.lower()}",
            "summary": f"Retired: {method.upper()} {path}",
            "description": GONE_DESCRIPTION,
            "tags": ["retired"],
            "security": [{}],
            "deprecated": True,
            "responses": {
                "410": {
                    "description": "Gone: this endpoint was retired in contract 2.0.0 (gone_error).",
                    "headers": {
                        "Link": {
                            "description": 'The Memories guide: `<guide_url>; rel="help"`.',
                            "schema": {"type": "string"},
                        }
                    },
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
            },
        }
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", path)
        ]
        if parameters:
            operation["parameters"] = parameters
        return operation


def keep_only_retired_statuses(result, generator, request, public):
    """POSTPROCESSING_HOOK (after config.schema.add_error_responses): a retired operation never answers
    401/403/404/409, so only its 410 and the request screening's and the HTTP layer's responses are kept."""
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            if isinstance(operation, dict) and "retired" in operation.get("tags", ()):
                operation["responses"] = {
                    status: body for status, body in operation["responses"].items() if status in RETIRED_STATUSES
                }
    return result
