"""Path rules and content limits of file memories (SPEC §5, §9), through the API."""

from __future__ import annotations

import pytest

from tests.files.conftest import memories_url
from versions.models import Memory, Version

VALID_PATHS = [
    "/a",
    "/notes/todo.md",
    "/" + "/".join(f"s{i}" for i in range(20)),  # 20 segments
    "/" + "/".join(["a" * 255] * 4),  # 1,024 bytes, each segment at its 255-byte limit
    "/" + "/".join(["é" * 127 + "a"] * 4),  # 1,024 bytes of mostly two-byte characters
    "/notes/.anthropic-memory-store",  # the marker's name is reserved at the root only
    "/Café/ünïcode.md",  # NFC
    "/a b/c-d_e.f",
    "/.hidden/..dots/...",  # dot-only names other than . and .. are fine
    "/UPPER.md",
]

INVALID_PATHS = [
    ("", 'start with "/"'),
    ("a.md", 'start with "/"'),
    ("/", "empty segment"),
    ("//a", "empty segment"),
    ("/a//b", "empty segment"),
    ("/a/", "empty segment"),
    ("/./a", "'.' or '..'"),
    ("/a/..", "'.' or '..'"),
    ("/a/../b", "'.' or '..'"),
    ("/" + "/".join(f"s{i}" for i in range(21)), "at most 20 segments"),
    ("/" + "a" * 1024, "limit is 1024 bytes"),
    ("/" + "é" * 512, "limit is 1024 bytes"),
    ("/" + "a" * 256, "limit is 255 bytes"),  # no file system of a mount takes a longer name (a breaker)
    ("/d/" + "é" * 128, "limit is 255 bytes"),
    ("/.anthropic-memory-store", "reserved"),  # the SDK's marker file at the root of every mount
    ("/.anthropic-memory-store/x.md", "reserved"),  # nor a folder of that name (a second breaker)
    ("/.Anthropic-Memory-Store", "reserved"),  # the marker itself on a case-insensitive file system
    ("/.ANTHROPIC-MEMORY-STORE/x.md", "reserved"),
    ("/a\tb", "U+0009"),
    ("/a\nb", "U+000A"),
    ("/a\x7fb", "U+007F"),
    ("/a\x85b", "U+0085"),
    ("/a\u200bb", "U+200B"),
    ("/a\u00adb", "U+00AD"),
    ("/a\ufeffb", "U+FEFF"),
    ("/a\u2060b", "U+2060"),
    ("/a\u2028b", "U+2028"),
    ("/a\u2029b", "U+2029"),
    ("/Cafe\u0301.md", "NFC"),  # e + combining acute: NFD, not normalised for you
]


@pytest.mark.parametrize("path", VALID_PATHS)
def test_a_valid_path_is_accepted_exactly_as_sent(owner_client, private_store, path):
    response = owner_client.post(memories_url(private_store), {"path": path, "content": "x"})
    assert response.status_code == 200, response.json()
    assert response.json()["path"] == path
    assert Memory.objects.get().path == path


@pytest.mark.parametrize(("path", "why"), INVALID_PATHS)
def test_an_invalid_path_is_rejected_with_a_message_and_nothing_is_written(owner_client, private_store, path, why):
    response = owner_client.post(memories_url(private_store), {"path": path, "content": "x"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("path:") and why in error["message"]
    assert not Memory.objects.exists() and not Version.objects.exists()


@pytest.mark.parametrize(("path", "why"), INVALID_PATHS[1:])
def test_a_rename_to_an_invalid_path_is_rejected(owner_client, private_store, seed, path, why):
    memory = seed("/ok.md")
    response = owner_client.post(memories_url(private_store, str(memory.pk)), {"path": path})
    assert response.status_code == 400 and why in response.json()["error"]["message"]
    assert Memory.objects.get().path == "/ok.md"


def test_the_reserved_path_is_the_sdks_marker_file():
    from anthropic.lib.tools._memories import MARKER_PATH

    from versions.validation import RESERVED_PATHS

    assert {"/" + MARKER_PATH} == RESERVED_PATHS


def test_paths_are_case_sensitive(owner_client, private_store, seed):
    seed("/Notes.md", "upper")
    response = owner_client.post(memories_url(private_store), {"path": "/notes.md", "content": "lower"})
    assert response.status_code == 200
    assert sorted(Memory.objects.values_list("path", flat=True)) == ["/Notes.md", "/notes.md"]


@pytest.mark.parametrize(
    "content",
    ["a" * 102_400, "é" * 51_200, "😀" * 25_600, "€" * 34_133 + "a"],
    ids=["ascii", "two-byte", "four-byte", "three-byte"],
)
def test_content_of_exactly_102400_bytes_is_accepted(owner_client, private_store, content):
    assert len(content.encode("utf-8")) == 102_400
    response = owner_client.post(memories_url(private_store) + "?view=full", {"path": "/big.md", "content": content})
    assert response.status_code == 200
    assert response.json()["content_size_bytes"] == 102_400
    assert response.json()["content"] == content


@pytest.mark.parametrize(
    "content",
    ["a" * 102_401, "é" * 51_200 + "a", "😀" * 25_600 + "a", "a" * 102_399 + "é"],
    ids=["ascii", "two-byte", "four-byte", "straddling"],
)
def test_content_one_byte_over_the_limit_is_rejected(owner_client, private_store, content):
    assert len(content.encode("utf-8")) == 102_401
    response = owner_client.post(memories_url(private_store), {"path": "/big.md", "content": content})
    assert response.status_code == 400
    assert "102401 UTF-8 bytes" in response.json()["error"]["message"]
    assert not Memory.objects.exists()


def test_an_update_one_byte_over_the_limit_is_rejected_and_keeps_the_content(owner_client, private_store, seed):
    memory = seed("/a.md", "small")
    response = owner_client.post(memories_url(private_store, str(memory.pk)), {"content": "a" * 102_401})
    assert response.status_code == 400
    assert Memory.objects.get().content == "small"


def test_empty_content_is_an_empty_memory(owner_client, private_store):
    response = owner_client.post(memories_url(private_store), {"path": "/empty.md", "content": ""})
    assert response.status_code == 200
    assert response.json()["content_size_bytes"] == 0
    assert response.json()["content_sha256"] == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_content_is_stored_and_hashed_byte_exactly_without_normalisation(owner_client, private_store):
    content = "Cafe\u0301\r\n  trailing  \n"
    response = owner_client.post(memories_url(private_store) + "?view=full", {"path": "/raw.md", "content": content})
    assert response.json()["content"] == content
    import hashlib

    assert response.json()["content_sha256"] == hashlib.sha256(content.encode("utf-8")).hexdigest()


def test_null_content_on_create_is_rejected(owner_client, private_store):
    response = owner_client.post(memories_url(private_store), {"path": "/a.md", "content": None})
    assert response.status_code == 400 and response.json()["error"]["message"].startswith("content:")


@pytest.mark.parametrize(
    "body",
    [
        {"path": "/a.md"},
        {"content": "x"},
        {"path": 5, "content": "x"},
        {"path": "/a.md", "content": 5},
        {"path": "/a.md", "content": ["x"]},
        {"path": "/a.md", "content": "x", "extra": 1},
        {"path": ["/a.md"], "content": "x"},
    ],
)
def test_a_malformed_create_body_is_rejected(owner_client, private_store, body):
    response = owner_client.post(memories_url(private_store), body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert not Memory.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [b'{"path": "/a\\u0000", "content": "x"}', b'{"path": "/a", "content": "\\ud800"}', b'{"path": "/a", "content'],
    ids=["nul", "lone-surrogate", "truncated"],
)
def test_hostile_json_is_rejected(owner_client, private_store, raw):
    response = owner_client.generic("POST", memories_url(private_store), raw, content_type="application/json")
    assert response.status_code == 400
    assert not Memory.objects.exists()
