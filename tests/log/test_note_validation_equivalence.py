"""`config.api.validate` (the shared prototype, issue 17) answers every note body as a fresh serializer does."""

from __future__ import annotations

import json

import pytest
from rest_framework import serializers

from config.api import validate
from memories.api import serializers as s

BODIES = [
    None, [], [1], "x", 1, 1.5, True, {}, {"body_md": None}, {"body_md": 1}, {"body_md": True}, {"body_md": ""},
    {"body_md": "x" * 1025}, {"body_md": "é" * 512}, {"body_md": "é" * 513}, {"body_md": "a\x00b"},
    {"body_md": "\ud800"}, {"body_md": ["x"]}, {"body_md": {"a": 1}}, {"body_md": "ok", "extra": 1},
    {"body_md": "ok", "client_nonce": ""}, {"body_md": "ok", "client_nonce": None},
    {"body_md": "ok", "client_nonce": "n" * 129}, {"body_md": "ok", "client_nonce": 5}, {"body_md": "ok"},
    {"body_md": " é "}, {"client_nonce": "x"},
]  # fmt: skip


@pytest.mark.parametrize("data", BODIES, ids=range(len(BODIES)))
def test_validate_equals_a_fresh_serializer(data):
    fresh = s.NoteRequestSerializer(data=data)
    if fresh.is_valid():
        assert validate(s.NoteRequestSerializer, data) == fresh.validated_data
    else:
        with pytest.raises(serializers.ValidationError) as caught:
            validate(s.NoteRequestSerializer, data)
        assert json.dumps(caught.value.detail) == json.dumps(fresh.errors)  # the same 400 body
