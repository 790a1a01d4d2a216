"""Real responses checked against `/openapi.yaml`, read as OpenAPI 3.0.3 says (SPEC §2, docs/decisions.md
"The contract, exact").

`openapi-schema-validator`'s OAS 3.0 read validator, not a conversion to JSON Schema: `nullable: true`
admits null only beside a `type` in the same object (so a nullable reference that refuses null is caught),
`additionalProperties: false` closes an object, references resolve in the document's `components`.
"""

from __future__ import annotations

from openapi_schema_validator import OAS30ReadValidator


def responses_of(document: dict, operation: dict) -> dict[str, dict]:
    """An operation's responses by status, each shared one (`$ref: #/components/responses/…`) resolved."""
    shared = document.get("components", {}).get("responses", {})
    return {
        status: shared[response["$ref"].rsplit("/", 1)[1]] if "$ref" in response else response
        for status, response in operation["responses"].items()
    }


def documented_response(document: dict, path: str, method: str, status: int) -> dict:
    """The response object the document declares for `status` (fails when the status is undocumented)."""
    responses = responses_of(document, document["paths"][path][method])
    assert str(status) in responses, f"{method.upper()} {path} answered {status}; documented: {sorted(responses)}"
    return responses[str(status)]


def response_errors(document: dict, path: str, method: str, status: int, body) -> list[str]:
    """Where `body` (parsed JSON) breaks the schema the document declares for `status`; [] when it fits."""
    declared = documented_response(document, path, method, status)
    schema = declared["content"]["application/json"]["schema"]
    validator = OAS30ReadValidator({**schema, "components": document["components"]})
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '(body)'}: {error.message}"
        for error in validator.iter_errors(body)
    ]


def check(document: dict, path: str, method: str, response) -> None:
    """One real response (a test client's or httpx's) is documented: its status, and its JSON body fits."""
    errors = response_errors(document, path, method, response.status_code, response.json())
    assert not errors, (method.upper(), path, response.status_code, errors)
