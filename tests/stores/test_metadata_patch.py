"""A metadata patch is judged as a whole before it is applied (SPEC §5 update; stores.validation.patch_metadata).

A delete (`{"k": null}`) of a key that could never be stored was a silent no-op: any length, any count, U+2028
(a breaker). Every key of a patch — the ones that delete included — follows the key rule, and a patch holds
at most 32 keys (delete all 16 pairs and set 16 new ones in one request).
"""

from __future__ import annotations

import json

import pytest

from config.errors import InvalidRequest
from sessions.models import Environment
from stores.validation import METADATA_PATCH_MAX_KEYS, patch_metadata
from tests.factories import StoreFactory

pytestmark = pytest.mark.django_db

BAD_PATCHES = [
    pytest.param({"k" * 65: None}, id="long-key-delete"),
    pytest.param({"": None}, id="empty-key-delete"),
    pytest.param({"k\u2028": None}, id="line-separator-key-delete"),
    pytest.param({"k\x1b": None}, id="control-key-delete"),
    pytest.param({"k\ud800": None}, id="lone-surrogate-key-delete"),
    pytest.param({f"k{i}": None for i in range(METADATA_PATCH_MAX_KEYS + 1)}, id="too-many-deletes"),
    pytest.param({"k": 5}, id="number-value"),
    pytest.param({"k": ["v"]}, id="list-value"),
    pytest.param({"k": True}, id="boolean-value"),
]


@pytest.mark.parametrize("patch", BAD_PATCHES)
def test_the_merge_refuses_a_bad_patch_whatever_its_values_do(patch):
    with pytest.raises(InvalidRequest) as refused:
        patch_metadata({"k": "v"}, patch)
    assert refused.value.details == {"error_code": "invalid_metadata"}
    assert refused.value.message.startswith("metadata: ")


def test_one_patch_may_replace_all_sixteen_pairs():
    current = {f"old{i}": "v" for i in range(16)}
    patch = {**dict.fromkeys(current), **{f"new{i}": "w" for i in range(16)}}
    assert len(patch) == METADATA_PATCH_MAX_KEYS
    assert patch_metadata(current, patch) == {f"new{i}": "w" for i in range(16)}


def test_the_result_still_holds_at_most_sixteen_pairs():
    with pytest.raises(InvalidRequest, match="at most 16 pairs"):
        patch_metadata({f"old{i}": "v" for i in range(10)}, {f"new{i}": "w" for i in range(7)})


def test_deleting_a_key_that_is_not_there_is_allowed():
    assert patch_metadata({"a": "1"}, {"b": None}) == {"a": "1"}


@pytest.mark.parametrize("patch", BAD_PATCHES)
def test_a_store_update_with_a_bad_patch_is_a_400_and_changes_nothing(owner_client, owner, patch):
    store = StoreFactory(owner=owner, metadata={"k": "v"})
    before = store.updated_at
    body = json.dumps({"metadata": patch})  # ASCII-escaped: a lone surrogate travels as `\ud800`
    response = owner_client.post(f"/api/v1/memory_stores/{store.pk}", body, content_type="application/json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["message"].startswith("metadata")  # a lone surrogate: the body screening's
    assert error["details"]["error_code"] == "invalid_metadata"
    store.refresh_from_db()
    assert (store.metadata, store.updated_at) == ({"k": "v"}, before)


def test_an_environment_update_judges_the_keys_it_deletes(owner_client, owner):
    environment = Environment.objects.create(owner=owner, name="env", metadata={"k": "v"})
    url = f"/api/v1/environments/{environment.pk}"
    response = owner_client.post(url, {"metadata": {"k" * 65: None}}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"]["error_code"] == "invalid_metadata"
    response = owner_client.post(url, {"metadata": {"k": None}}, format="json")
    assert response.status_code == 200, response.content
    environment.refresh_from_db()
    assert environment.metadata == {}


# NUL and lone surrogates are refused by the body screening (config.parsers), before any serializer: the
# refusal still carries the code every other metadata refusal does, which the anthropic SDK maps.
SCREENED = [
    pytest.param('{"metadata": {"k\\u0000": "v"}}', "metadata: Has a key that", id="nul-key"),
    pytest.param('{"metadata": {"k": "v\\u0000"}}', "metadata.k: Contains", id="nul-value"),
    pytest.param('{"metadata": {"k": "\\udc00"}}', "metadata.k: Contains", id="lone-surrogate-value"),
    pytest.param('{"metadata": {"\\ud800": null}}', "metadata: Has a key that", id="lone-surrogate-key"),
    # a key that is no plain name is a JSON string in the path: `metadata.a: b: Contains…` named the field
    # `metadata.a` and the problem "b: Contains…"; `metadata.é` had no details.fields at all
    pytest.param('{"metadata": {"a: b": "\\u0000"}}', 'metadata["a: b"]: Contains a NUL', id="colon-key"),
    pytest.param('{"metadata": {"é.x": "\\u0000"}}', 'metadata["é.x"]: Contains a NUL', id="non-ascii-key"),
    pytest.param('{"metadata": {"": "\\u0000"}}', 'metadata[""]: Contains a NUL', id="empty-key"),
]


def _metadata_targets(owner):
    store = StoreFactory(owner=owner, metadata={"k": "v"})
    environment = Environment.objects.create(owner=owner, name="env", metadata={"k": "v"})
    return [
        ("/api/v1/memory_stores", {"name": "s"}),
        (f"/api/v1/memory_stores/{store.pk}", {}),
        ("/api/v1/environments", {"name": "e2"}),
        (f"/api/v1/environments/{environment.pk}", {}),
    ]


@pytest.mark.parametrize(("body", "message"), SCREENED)
def test_screened_metadata_carries_the_invalid_metadata_code(owner_client, owner, body, message):
    from stores.models import Store

    targets = _metadata_targets(owner)
    stores_before, environments_before = Store.objects.count(), Environment.objects.count()
    for url, extra in targets:
        # The JSON text keeps the escape, so the server decodes the bad character itself.
        merged = body if not extra else json.dumps(extra)[:-1] + ", " + body[1:]
        response = owner_client.post(url, merged, content_type="application/json")
        assert response.status_code == 400, (url, response.content)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(message), error
        assert error["details"]["error_code"] == "invalid_metadata", error
        assert error["message"] == "; ".join(
            f"{name}: {problem}" for name, problem in error["details"]["fields"].items()
        )
        assert list(error["details"]["fields"]) == [message.rsplit(": ", 1)[0]], error
    assert (Store.objects.count(), Environment.objects.count()) == (stores_before, environments_before)
    assert Store.objects.get(metadata={"k": "v"}) and Environment.objects.get(metadata={"k": "v"})


def test_other_screened_fields_keep_the_plain_parse_error(owner_client, owner):
    response = owner_client.post("/api/v1/memory_stores", '{"name": "s\\u0000"}', content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == "name: Contains a NUL character." and error["details"]["fields"] == {
        "name": "Contains a NUL character."
    }
    assert "error_code" not in error.get("details", {})


def test_a_key_spelled_metadata_dot_something_is_no_metadata(owner_client):
    """The field path `metadata.x` of a top-level key "metadata.x" is not the metadata field (a breaker)."""
    response = owner_client.post(
        "/api/v1/environments", '{"name": "e", "metadata.x": "\\u0000"}', content_type="application/json"
    )
    assert response.status_code == 400
    assert "error_code" not in response.json()["error"].get("details", {}), response.content


def test_metadata_on_an_operation_without_it_is_an_unknown_field_whatever_it_holds(owner_client, owner):
    """`POST …/keys` takes no metadata: a NUL inside it is the plain 400, not the SDK's invalid-metadata error."""
    environment = Environment.objects.create(owner=owner, name="env")
    url = f"/api/v1/environments/{environment.pk}/keys"
    for body in ('{"metadata": {"k": "v"}}', '{"metadata": {"k": "v\\u0000"}}'):
        response = owner_client.post(url, body, content_type="application/json")
        assert response.status_code == 400, response.content
        assert "error_code" not in response.json()["error"].get("details", {}), (body, response.content)
