"""One error shape everywhere, and hostile input that never reaches a 500 (SPEC §2)."""

from __future__ import annotations

import io
import json

import pytest
from django.test import Client, override_settings
from rest_framework import exceptions as drf

from config.errors import InvalidRequest, describe
from sessions.services.environments import create_environment
from stores.models import Store
from tests.foundation.test_auth import assert_error

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.foundation.urls")]


def test_validation_error_names_the_field(owner_client):
    body = assert_error(owner_client.post("/probe", {"count": "many"}), 400, "invalid_request_error")
    assert "count" in body["error"]["message"]
    assert "count" in body["error"]["details"]["fields"]


def test_unknown_field_is_rejected_by_name(owner_client):
    body = assert_error(owner_client.post("/probe", {"count": 1, "colour": "red"}), 400, "invalid_request_error")
    assert "colour" in body["error"]["message"]


def test_a_400_never_grows_with_what_the_client_sent(owner_client, private_store):
    """10,000 unknown keys (650 KB) were answered with every name twice (3.1 MB), one 900 KB key with 1.8 MB
    (found by a breaker): at most 20 problems are named, each name and message cut."""
    from config.errors import MAX_FIELD_CHARS, MAX_LISTED_PROBLEMS

    note = f"/api/v1/memories/{private_store.pk}/note"
    many = {"body_md": "x", **{f"unknown_field_{n:05d}": 1 for n in range(10_000)}}
    body = assert_error(owner_client.post(note, many, format="json"), 400, "invalid_request_error")
    assert len(json.dumps(body)) < 8_000
    assert body["error"]["message"].endswith("; and 9980 more")
    assert len(body["error"]["details"]["fields"]) == MAX_LISTED_PROBLEMS
    huge = {"body_md": "x", "k" * 900_000: 1}
    body = assert_error(owner_client.post(note, huge, format="json"), 400, "invalid_request_error")
    assert len(json.dumps(body)) < 2_000
    assert [len(name) for name in body["error"]["details"]["fields"]] == [len('"' + "k" * 60 + '"…')]
    assert len('"' + "k" * 60 + '"…') < MAX_FIELD_CHARS


def test_a_field_with_two_problems_keeps_both_in_details():
    status, _, message, details, _, _ = describe(drf.ValidationError({"name": ["Too long.", "Not a name."]}))
    assert status == 400 and details == {"fields": {"name": "Too long.; Not a name."}}
    assert message == "name: Too long.; name: Not a name."


@pytest.mark.parametrize(
    "url, body, field",
    [
        ("/api/v1/projects", {"slug": "x" * 65, "name": "X"}, "slug"),
        ("/api/v1/projects", {"slug": "-x-", "name": "X"}, "slug"),
        ("/api/v1/memories/{store}/share", {"handle": "!" * 65}, "handle"),
        ("/api/v1/memories/{store}/share", {"handle": "h" * 300}, "handle"),
    ],
)
def test_a_slug_or_handle_of_the_wrong_shape_is_one_problem(private_store, owner_client, url, body, field):
    """A 65-character slug got "no more than 64 characters" and "must be 1–64 …" together (a tester)."""
    response = owner_client.post(url.format(store=private_store.pk), body, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert set(error["details"]["fields"]) == {field} and "; " not in error["details"]["fields"][field]
    assert error["details"]["fields"][field].startswith("Must be ") and "1–64" in error["message"]


def test_a_nested_field_is_named_in_details_too(private_store, owner_client):
    """`precondition.content_sha256: …` and `resources[0].…: …` named their field in the message only (a tester)."""
    created = owner_client.post(
        f"/api/v1/memory_stores/{private_store.pk}/memories", {"path": "/a.md", "content": "x"}, format="json"
    )
    assert created.status_code == 200, created.content
    update = {"content": "y", "precondition": {"type": "content_sha256", "content_sha256": "zz"}}
    url = f"/api/v1/memory_stores/{private_store.pk}/memories/{created.json()['id']}"
    environment = create_environment(owner=private_store.owner, name="env")
    session = {
        "environment_id": str(environment.pk),
        "agent": {"type": "agent", "id": "agent_test", "version": 1},
        "resources": [{"type": "memory_store", "memory_store_id": "abc"}],
    }
    for response, field in [
        (owner_client.post(url, update, format="json"), "precondition.content_sha256"),
        (owner_client.post("/api/v1/sessions", session, format="json"), "resources[0].memory_store_id"),
    ]:
        error = assert_error(response, 400, "invalid_request_error")["error"]
        assert field in error["details"]["fields"], error
        assert f"{field}: {error['details']['fields'][field]}" in error["message"]


@pytest.mark.parametrize(
    "message, fields",
    [
        ("precondition.content_sha256: must be 64 lowercase hexadecimal characters.", "precondition.content_sha256"),
        ("resources[0].memory_store_id: must be a UUID.", "resources[0].memory_store_id"),
        ("agent.id: must be a string.", "agent.id"),
        ("A sentence: not a field.", None),
    ],
)
def test_a_service_refusal_naming_a_nested_field_carries_it(message, fields):
    _, _, said, details, _, _ = describe(InvalidRequest(message))
    assert said == message
    assert details.get("fields") == ({fields: message.split(": ", 1)[1]} if fields else None)


def test_bad_json_is_400(owner_client):
    response = owner_client.generic("POST", "/probe", b'{"count": ', content_type="application/json")
    assert_error(response, 400, "invalid_request_error")


@pytest.mark.parametrize("raw", [b"\r", b"   ", b"\n\t "])
def test_a_whitespace_only_body_is_400_not_an_empty_object(owner_client, raw):
    """JSON is a value between optional whitespace: whitespace alone is no JSON text (schemathesis sent
    `\r` to a POST whose fields all have defaults, and it was served as `{}`). No body at all is `{}`."""
    response = owner_client.generic("POST", "/probe", raw, content_type="application/json")
    body = assert_error(response, 400, "invalid_request_error")
    assert "only whitespace" in body["error"]["message"]


def test_a_control_character_that_json_does_not_count_as_whitespace_is_bad_json(owner_client):
    response = owner_client.generic("POST", "/probe", b"\x0b", content_type="application/json")
    body = assert_error(response, 400, "invalid_request_error")
    assert "only whitespace" not in body["error"]["message"]


def test_nan_is_not_json(owner_client):
    response = owner_client.generic("POST", "/probe", b'{"count": NaN}', content_type="application/json")
    assert_error(response, 400, "invalid_request_error")


def test_invalid_utf8_body_is_400(owner_client):
    response = owner_client.generic("POST", "/probe", b'{"text": "\xff\xfe"}', content_type="application/json")
    body = assert_error(response, 400, "invalid_request_error")
    assert "UTF-8" in body["error"]["message"]


@pytest.mark.parametrize("payload", [b'{"count": 1, "text": "a\\u0000b"}', b'{"count": 1, "text": "\\ud800"}'])
def test_nul_and_lone_surrogate_in_json_are_400_naming_the_field(owner_client, payload):
    """In `field: problem` form with details.fields, the words the MCP tools use (tests/mcp/test_hostile.py)."""
    response = owner_client.generic("POST", "/probe", payload, content_type="application/json")
    body = assert_error(response, 400, "invalid_request_error")
    assert body["error"]["message"] in ("text: Contains a NUL character.", "text: Contains a lone surrogate.")
    assert body["error"]["details"]["fields"] == {"text": body["error"]["message"].removeprefix("text: ")}


def test_nul_in_a_json_key_is_400(owner_client):
    response = owner_client.generic("POST", "/probe", b'{"a\\u0000": 1}', content_type="application/json")
    assert_error(response, 400, "invalid_request_error")


def test_raw_surrogate_bytes_in_body_are_400(owner_client):
    response = owner_client.generic("POST", "/probe", b'{"text": "\xed\xa0\x80"}', content_type="application/json")
    assert_error(response, 400, "invalid_request_error")


@pytest.mark.parametrize("query", ["q=%00", "q=%ED%A0%80", "q=%FF", "a%00b=1"])
def test_nul_surrogate_or_bad_utf8_in_query_is_400(owner_client, query):
    assert_error(owner_client.get(f"/probe?{query}"), 400, "invalid_request_error")


@pytest.mark.parametrize("path", ["/api/v1/me%00", "/api/v1/%ED%A0%80", "/probe%00x"])
def test_nul_or_surrogate_in_path_is_400(owner_client, path):
    assert_error(owner_client.get(path), 400, "invalid_request_error")


def test_unknown_route_is_404_in_the_error_shape(owner_client):
    assert_error(owner_client.get("/api/v1/nope"), 404, "not_found_error")
    assert_error(Client().get("/definitely/not/here"), 404, "not_found_error")


def test_wrong_method_is_405_in_the_error_shape(owner_client):
    body = assert_error(owner_client.delete("/api/v1/me"), 405, "invalid_request_error")
    assert "DELETE" in body["error"]["message"]


@override_settings(MAX_REQUEST_BYTES=1000)
def test_oversized_body_is_413(owner_client):
    payload = json.dumps({"count": 1, "text": "x" * 2000})
    response = owner_client.generic("POST", "/probe", payload, content_type="application/json")
    assert_error(response, 413, "request_too_large")


def test_body_over_default_ceiling_is_413(owner_client):
    payload = json.dumps({"count": 1, "text": "x" * (1024 * 1024 + 1)})
    response = owner_client.generic("POST", "/probe", payload, content_type="application/json")
    assert_error(response, 413, "request_too_large")


def test_unhandled_exception_in_api_view_is_500_without_traceback(owner_client):
    owner_client.raise_request_exception = False
    response = owner_client.get("/explode")
    body = assert_error(response, 500, "api_error")
    assert "secret-internal-detail" not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert body["request_id"] in body["error"]["message"] or "request id" in body["error"]["message"]


def test_unhandled_exception_in_plain_view_is_500_in_the_error_shape():
    client = Client(raise_request_exception=False)
    response = client.get("/explode-django")
    assert_error(response, 500, "api_error")
    assert "secret-internal-detail" not in response.content.decode()


def test_every_response_has_a_request_id(owner_client):
    first = owner_client.get("/api/v1/me")
    second = owner_client.get("/api/v1/me")
    assert first["Request-Id"].startswith("req_")
    assert first["Request-Id"] != second["Request-Id"]


def test_wrong_content_type_is_415(owner_client):
    response = owner_client.generic("POST", "/probe", "count=1", content_type="application/x-www-form-urlencoded")
    assert_error(response, 415, "invalid_request_error")


def test_non_object_json_body_is_400(owner_client):
    response = owner_client.generic("POST", "/probe", b"[1, 2]", content_type="application/json")
    assert_error(response, 400, "invalid_request_error")


def chunked(client, path: str, body: bytes):
    """Send `body` as a server hands over a de-chunked request: no Content-Length, Transfer-Encoding set."""

    return client.generic(
        "POST",
        path,
        b"",
        content_type="application/json",
        **{"wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": "", "HTTP_TRANSFER_ENCODING": "chunked"},
    )


def test_chunked_body_is_read_not_dropped(owner_client):
    response = chunked(owner_client, "/probe", b'{"count": 7}')
    assert response.status_code == 201
    assert response.json()["data"] == {"count": 7}


def test_chunked_body_over_the_ceiling_is_413(owner_client, settings):
    settings.MAX_REQUEST_BYTES = 100
    response = chunked(owner_client, "/probe", b'{"count": 1, "text": "' + b"x" * 200 + b'"}')
    assert_error(response, 413, "request_too_large")


def test_huge_json_integer_is_a_clean_400(owner_client):
    payload = b'{"count": ' + b"9" * 5000 + b"}"
    response = owner_client.generic("POST", "/probe", payload, content_type="application/json")
    body = assert_error(response, 400, "invalid_request_error")
    assert "sys." not in body["error"]["message"]


def test_deeply_nested_json_is_a_clean_400(owner_client):
    response = owner_client.generic("POST", "/probe", b"[" * 100000 + b"]" * 100000, content_type="application/json")
    body = assert_error(response, 400, "invalid_request_error")
    assert "recursion" not in body["error"]["message"]


@pytest.mark.parametrize("method", ["post", "put", "delete", "options"])
@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/docs/memories"])
def test_plain_views_answer_other_methods_with_a_json_405(client, method, path):
    response = getattr(client, method)(path)
    assert_error(response, 405, "invalid_request_error")


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/docs/memories"])
def test_head_on_plain_views_is_200(client, path):
    assert client.head(path).status_code == 200


@pytest.mark.parametrize("path", ["/memories", "/memories.md", "/memories.json"])
def test_options_on_the_directory_is_a_json_405(client, path):
    assert_error(client.options(path), 405, "invalid_request_error")


def test_csrf_never_turns_an_api_style_post_into_an_html_page():
    response = Client(enforce_csrf_checks=True).post("/healthz", {})
    assert_error(response, 405, "invalid_request_error")


class _BrokenChunks:
    """A wsgi.input whose de-chunking fails, as gunicorn's does on a bad chunk size or a vanished client."""

    def read(self, size=-1):
        raise ValueError("Invalid chunk size: b'ZZ'")

    readline = read


def test_malformed_chunked_body_is_400(owner_client):
    response = owner_client.generic(
        "POST",
        "/probe",
        b"",
        content_type="application/json",
        **{"wsgi.input": _BrokenChunks(), "CONTENT_LENGTH": "", "HTTP_TRANSFER_ENCODING": "chunked"},
    )
    assert_error(response, 400, "invalid_request_error")


@pytest.mark.parametrize("coding", ["gzip", "br", "deflate", "identity, gzip", "GZIP"])
def test_a_body_in_a_content_coding_is_415_and_changes_nothing(owner_client, owner, coding):
    """`Content-Encoding: gzip` on a plain body was ignored and the body stored as it came (a breaker): a proxy
    that decodes it would have seen another body. Nothing here decodes one: 415, nothing written."""
    response = owner_client.post(
        "/api/v1/memory_stores", {"name": "x"}, content_type="application/json", HTTP_CONTENT_ENCODING=coding
    )
    body = assert_error(response, 415, "invalid_request_error")
    assert body["error"]["message"].startswith(f"Content-Encoding {coding.lower()} is not accepted")
    assert not Store.objects.filter(owner=owner, name="x").exists()
    bodiless = owner_client.get("/api/v1/me", HTTP_CONTENT_ENCODING=coding)
    assert bodiless.status_code == 200  # no body, nothing coded: the header is not in the way
    plain = owner_client.post(
        "/api/v1/memory_stores", {"name": "x"}, content_type="application/json", HTTP_CONTENT_ENCODING="identity"
    )
    assert plain.status_code == 200  # created (the SDK's create answers 200)


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate,chunked", "chunked, chunked", "gzip"])
def test_a_transfer_coding_but_chunked_alone_is_400_and_changes_nothing(owner_client, owner, coding):
    body = b'{"name": "x"}'
    response = owner_client.generic(
        "POST",
        "/api/v1/memory_stores",
        b"",
        content_type="application/json",
        **{"wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": "", "HTTP_TRANSFER_ENCODING": coding},
    )
    message = assert_error(response, 400, "invalid_request_error")["error"]["message"]
    assert message.startswith(f"Transfer-Encoding {', '.join(c.strip() for c in coding.split(','))} is not supported")
    assert not Store.objects.filter(owner=owner, name="x").exists()


def test_a_trailing_slash_on_a_route_says_routes_take_none(owner_client, private_store, stranger_client):
    """A bare "Not found." left a tester guessing. The hint names the route without the slash; it depends on
    the route alone, never on whether the caller may read the store in it."""
    body = assert_error(owner_client.get("/api/v1/me/"), 404, "not_found_error")
    assert body["error"]["message"] == "Not found: routes take no trailing slash (this one is /api/v1/me)."
    mine = assert_error(owner_client.get(f"/api/v1/memories/{private_store.pk}/wake/"), 404, "not_found_error")
    theirs = assert_error(stranger_client.get(f"/api/v1/memories/{private_store.pk}/wake/"), 404, "not_found_error")
    assert mine["error"] == theirs["error"]
    unknown = assert_error(owner_client.get("/api/v1/nothing/"), 404, "not_found_error")
    assert unknown["error"]["message"] == "Not found."


@pytest.mark.parametrize(
    "value, named", [(True, "a JSON boolean (true or false)"), (1, "an integer"), ({}, "an object")]
)
def test_a_choice_given_another_json_type_says_which_type(private_store, owner_client, value, named):
    """`{"visibility": true}` was `"True" is not a valid choice.`: DRF turned the boolean into a string. The
    words are the MCP tools' (config.mcp_tools)."""
    response = owner_client.patch(f"/api/v1/memories/{private_store.pk}", {"visibility": value}, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["message"] == f"visibility: Must be a string, not {named}."
    assert Store.objects.get(pk=private_store.pk).visibility == private_store.visibility


def test_a_value_quoted_in_a_message_is_written_as_json(private_store, owner_client):
    """`resources[0].type: True is not supported` quoted Python's spelling of the value (a tester)."""
    environment = create_environment(owner=private_store.owner, name="env2")
    session = {
        "environment_id": str(environment.pk),
        "agent": {"type": "agent", "id": "agent_test", "version": 1},
        "resources": [{"type": True}],
    }
    error = assert_error(owner_client.post("/api/v1/sessions", session, format="json"), 400, "invalid_request_error")
    assert error["error"]["message"].startswith("resources[0].type: true is not supported")
    assert set(error["error"]["details"]) == {"fields"}  # no second spelling (`field`) beside it


def test_a_list_item_of_another_json_type_is_named_by_its_index(owner_client):
    """`scopes.0: "True" is not a scope` (a tester): the index as in `resources[0]`, the type in JSON's words."""
    response = owner_client.post("/api/v1/me/tokens", {"name": "n", "scopes": [True]}, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["details"]["fields"] == {"scopes[0]": "Must be a string, not a JSON boolean (true or false)."}


@pytest.mark.parametrize("body, named", [([1, 2], "an array"), ("x", "a string"), (7, "an integer"), (None, "null")])
def test_a_body_that_is_not_an_object_says_what_it_is(owner_client, body, named):
    """DRF's "Invalid data. Expected a dictionary, but got list." spelled the type in Python (a tester)."""
    response = owner_client.post("/api/v1/me/tokens", json.dumps(body), content_type="application/json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["message"] == f"Must be a JSON object, not {named}."


def test_an_empty_key_is_named_as_json_writes_it(owner_client, private_store):
    """`{"": 1}` was refused with a bare "Unknown field." — no name to say which (a tester)."""
    response = owner_client.post(f"/api/v1/memories/{private_store.pk}/note", {"body_md": "x", "": 1}, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["message"] == '"": Unknown field.' and error["details"]["fields"] == {'""': "Unknown field."}
    stale = f"/api/v1/memories/{private_store.pk}?expected_entry_count=0&generation=0"
    deleted = owner_client.delete(stale, json.dumps({"": 1}), content_type="application/json")
    assert assert_error(deleted, 400, "invalid_request_error")["error"]["message"] == '"": Unknown field.'
    assert Store.objects.filter(pk=private_store.pk).exists() and not private_store.entries.exists()


@pytest.mark.parametrize(
    "value, problem",
    [
        ("é\\", '"é\\\\" is not a range; write "n" for one entry or "a-b" (inclusive).'),
        ('1"2', '"1\\"2" is not a range; write "n" for one entry or "a-b" (inclusive).'),
        ("5-6", '"5-6" is not aligned; its start must be a multiple of its size (2).'),
        ("4-4", '"4-4" is one entry; write it as "4".'),
        (7, "Must be a string, not an integer."),  # the words /mcp uses
    ],
)
def test_a_value_in_a_range_refusal_is_quoted_as_json(owner_client, private_store, value, problem):
    """`range: 'é\\\\' is not a range` quoted the value in Python's spelling (a tester): JSON's, as elsewhere."""
    response = owner_client.post(f"/api/v1/memories/{private_store.pk}/compact", {"range": value}, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["details"]["fields"]["range"] == problem


def test_a_metadata_refusal_quotes_the_key_as_json_and_names_the_type(owner_client):
    response = owner_client.post("/api/v1/memory_stores", {"name": "s", "metadata": {"it's": 7}}, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["message"] == """metadata: value of "it's" must be a string, not an integer."""
    assert not Store.objects.filter(name="s").exists()


def test_a_list_given_another_json_type_says_which_type(owner_client):
    """DRF's ListField said `Expected a list of items but got type "bool".` (a tester)."""
    response = owner_client.post("/api/v1/me/tokens", {"name": "n", "scopes": True}, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["details"]["fields"] == {"scopes": "Must be an array, not a JSON boolean (true or false)."}


def test_a_repeated_query_parameter_item_is_named_by_its_index(owner_client):
    """`statuses[]=bogus` was named `statuses[][0]`."""
    response = owner_client.get("/api/v1/sessions?statuses[]=running&statuses[]=bogus")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert list(error["details"]["fields"]) == ["statuses[1]"]


def test_a_null_list_item_says_which_type_it_should_be(owner_client):
    """`scopes: [null]` kept DRF's "This field may not be null." (helper-92)."""
    response = owner_client.post("/api/v1/me/tokens", {"name": "n", "scopes": [None]}, format="json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    assert error["details"]["fields"] == {"scopes[0]": "Must be a string, not null."}


def test_unknown_keys_that_are_not_plain_names_are_quoted_and_never_merge(owner_client, private_store):
    """`{"": 1, "\\"\\"": 2}` named both `""`, one report lost; `a"b` came out raw (helper-92)."""
    body = {"body_md": "x", "": 1, '""': 2, 'a"b': 3, "plain_name-2": 4}
    response = owner_client.post(f"/api/v1/memories/{private_store.pk}/note", body, format="json")
    fields = assert_error(response, 400, "invalid_request_error")["error"]["details"]["fields"]
    assert set(fields) == {'""', '"\\"\\""', '"a\\"b"', "plain_name-2"}
    assert not private_store.entries.exists()


def test_an_unknown_query_parameter_in_the_apis_bracket_style_is_named_as_it_is(owner_client, private_store):
    """`created_at[gt]` was named `"created_at[gt]"` beside the API's own `created_at[gte]`, named bare (and
    bare again when given twice; helper-98). A query has no nesting for brackets to be mistaken for."""
    url = f"/api/v1/memory_stores/{private_store.pk}/memory_versions"
    query = "created_at[gt]=2026-01-01T00:00:00Z&statuses[]=x&a[b][]=1&a%20b=1"
    fields = assert_error(owner_client.get(f"{url}?{query}"), 400, "invalid_request_error")["error"]["details"]
    assert set(fields["fields"]) == {"created_at[gt]", "statuses[]", "a[b][]", '"a b"'}, fields
    repeated = owner_client.get(f"{url}?created_at[gte]=2026-01-01T00:00:00Z&created_at[gte]=2026-01-02T00:00:00Z")
    assert set(assert_error(repeated, 400, "invalid_request_error")["error"]["details"]["fields"]) == {
        "created_at[gte]"
    }
    body = {"body_md": "x", "a[0]": 1}  # in a body, brackets are an index: such a key stays a JSON string
    response = owner_client.post(f"/api/v1/memories/{private_store.pk}/note", body, format="json")
    assert set(assert_error(response, 400, "invalid_request_error")["error"]["details"]["fields"]) == {'"a[0]"'}


def test_long_plain_unknown_names_that_begin_alike_are_listed_once(owner_client, private_store):
    """Two plain 150-character names that differ at the end were both cut at 100 characters into one field
    and its problems joined: "Unknown field.; Unknown field." (helper-93). A name over 60 characters is
    written as a cut JSON string, as any other long name is, and listed once."""
    body = {"body_md": "x", "a" * 149 + "1": 1, "a" * 149 + "2": 2, "b" * 60: 3}
    response = owner_client.post(f"/api/v1/memories/{private_store.pk}/note", body, format="json")
    fields = assert_error(response, 400, "invalid_request_error")["error"]["details"]["fields"]
    assert fields == {'"' + "a" * 60 + '"…': "Unknown field.", "b" * 60: "Unknown field."}
    assert not private_store.entries.exists()


def test_a_quoted_value_escapes_every_control_and_separator_character():
    """U+009B (a terminal's escape introducer), DEL, C1 and U+2028 came out raw in messages (helper-92)."""
    from config.text import quoted

    assert quoted("\x85\x9b31m\x7f") == '"\\u0085\\u009b31m\\u007f"'
    assert quoted("a\u2028b\u2029") == '"a\\u2028b\\u2029"'
    assert quoted("\x01\ud800é") == '"\\u0001\\ud800é"'
    assert quoted("x" * 10, 4) == '"xxxx"…' and quoted(True) == "true"


def test_one_line_escapes_what_would_break_a_log_line_and_keeps_the_rest():
    """`config.text.one_line` (the worker's log formatter): every C0 control, DEL, C1, U+2028/U+2029 and lone
    surrogate escaped; backslashes, quotes and other text kept."""
    from config.text import one_line

    assert one_line("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert one_line("\x00\x1b[2K\x7f\x85\x9b") == "\\x00\\x1b[2K\\x7f\\x85\\x9b"
    assert one_line("\u2028\u2029\udc80") == "\\u2028\\u2029\\udc80"
    assert one_line('é "x" \\n 日本') == 'é "x" \\n 日本'
    for code in range(0x110000):
        char = chr(code)
        escaped = one_line(char)
        assert "\n" not in escaped and "\r" not in escaped and "\x1b" not in escaped
        breaks = code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029) or 0xD800 <= code <= 0xDFFF
        assert (escaped != char) == breaks, code


def test_a_path_conflict_quotes_the_paths_as_json(owner_client):
    """`A memory already exists at '/it\\'s'.` was Python's spelling (helper-92)."""
    store = owner_client.post("/api/v1/memory_stores", {"name": "files"}, format="json").json()
    url = f"/api/v1/memory_stores/{store['id']}/memories"
    assert owner_client.post(url, {"path": '/it\'s "x"', "content": "a"}, format="json").status_code in (200, 201)
    again = owner_client.post(url, {"path": '/it\'s "x"', "content": "b"}, format="json")
    error = assert_error(again, 409, "memory_path_conflict_error")["error"]
    assert error["message"] == 'A memory already exists at "/it\'s \\"x\\"".'


def test_unknown_keys_in_a_session_part_are_written_as_json(private_store, owner_client):
    """`agent: unknown field(s) , a, b, .` listed an empty key as nothing, `a, b` as two keys and U+009B raw
    (helper-93); then `agent: unknown field(s) "x".` where every other body says `x: Unknown field.`, and a
    nested serializer's unknown key was `precondition."a: b"` where the body screening wrote
    `precondition["a: b"]` (helper-94): one spelling of a field path, whichever check refuses."""
    environment = create_environment(owner=private_store.owner, name="env3")
    agent = {"type": "agent", "id": "a", "a, b": 1, "": 2, "\u009b": 3, "plain": 4}
    session = {"environment_id": str(environment.pk), "agent": agent}
    error = assert_error(owner_client.post("/api/v1/sessions", session, format="json"), 400, "invalid_request_error")
    fields = {'agent[""]', 'agent["\\u009b"]', 'agent["a, b"]', "agent.plain"}
    assert error["error"]["details"]["fields"] == dict.fromkeys(fields, "Unknown field.")
    assert error["error"]["message"] == "; ".join(
        f"{name}: Unknown field." for name in error["error"]["details"]["fields"]
    )
    resource = {"type": "memory_store", "memory_store_id": str(private_store.pk), "a: b": 1}
    session = {"environment_id": str(environment.pk), "agent": "a", "resources": [resource]}
    error = assert_error(owner_client.post("/api/v1/sessions", session, format="json"), 400, "invalid_request_error")
    assert error["error"]["details"]["fields"] == {'resources[0]["a: b"]': "Unknown field."}
    config = {"name": "e4", "config": {"type": "self_hosted", "a.b": 1}}
    error = assert_error(owner_client.post("/api/v1/environments", config, format="json"), 400, "invalid_request_error")
    assert error["error"]["details"]["fields"] == {'config["a.b"]': "Unknown field."}
    memory = owner_client.post(
        f"/api/v1/memory_stores/{private_store.pk}/memories", {"path": "/p.md", "content": "x"}, format="json"
    ).json()
    precondition = {"type": "content_sha256", "content_sha256": "0" * 64}
    url = f"/api/v1/memory_stores/{private_store.pk}/memories/{memory['id']}"
    for value, problem in ((1, "Unknown field."), ("\x00", "Contains a NUL character.")):
        body = {"content": "y", "precondition": {**precondition, "a: b": value}}
        error = assert_error(owner_client.post(url, body, format="json"), 400, "invalid_request_error")["error"]
        assert error["details"]["fields"] == {'precondition["a: b"]': problem}


def test_a_long_unknown_key_is_cut_and_still_a_json_string(owner_client):
    long = "x" * 120 + "."
    response = owner_client.post("/api/v1/memory_stores", {"name": "a", long: 1}, format="json")
    (name,) = assert_error(response, 400, "invalid_request_error")["error"]["details"]["fields"]
    assert name == '"' + "x" * 60 + '"…'


def test_a_screened_field_path_is_cut_like_every_other_field_name(owner_client):
    """The body screening named a NUL by its whole path: 200 nested 60-character keys made a 12 KB field name,
    twice in the answer (the bound every other 400 keeps, `config.errors.MAX_FIELD_CHARS`)."""
    from config.errors import MAX_FIELD_CHARS

    body: object = "\x00"
    for depth in range(200):
        body = {f"k{depth:03d}" + "x" * 56: body}
    response = owner_client.post("/api/v1/me/tokens", json.dumps(body), content_type="application/json")
    error = assert_error(response, 400, "invalid_request_error")["error"]
    [(field, problem)] = error["details"]["fields"].items()
    assert problem == "Contains a NUL character." and error["message"] == f"{field}: {problem}"
    assert len(field) == MAX_FIELD_CHARS and field.startswith("k199" + "x" * 56 + ".k198") and field.endswith("…")
