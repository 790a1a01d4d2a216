"""A deeply nested JSON body that starts with `[` on /mcp: the batch reader's `json.loads` raised
RecursionError, a 500 (found by a breaker). Now such a body is the SDK's to parse, as a single message with
the same nesting is: its clean -32700 Parse error."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts import services as account_services
from tests.factories import UserFactory

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def secret(db):
    return account_services.issue_token(user=UserFactory(handle="alice")).secret


def post(secret, body: str):
    client = Client(raise_request_exception=False)
    return client.post(
        "/mcp",
        data=body,
        content_type="application/json",
        HTTP_ACCEPT=ACCEPT,
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_MCP_PROTOCOL_VERSION="2025-03-26",
    )


DEEP_PARAMS = '{"a":' * 3000 + "1" + "}" * 3000


def test_single_message_with_deep_params_is_a_parse_error(secret):
    body = '{"jsonrpc":"2.0","id":1,"method":"ping","params":' + DEEP_PARAMS + "}"
    response = post(secret, body)
    assert response.status_code == 400 and response.json()["error"]["code"] == -32700


@pytest.mark.parametrize(
    "body",
    [
        "[" * 3000 + "]" * 3000,  # 6 KB
        '[{"jsonrpc":"2.0","id":1,"method":"ping","params":' + DEEP_PARAMS + "}]",
    ],
    ids=["nested-arrays", "batch-with-deep-params"],
)
def test_deeply_nested_batch_is_never_a_500(secret, body):
    response = post(secret, body)
    assert response.status_code < 500, response.content
    assert response.json()["error"]["code"] in (-32700, -32600)
