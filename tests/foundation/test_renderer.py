"""The API's JSON renderer gives DRF's bytes (config/renderers.py, issue 17)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import uuid

import pytest
from django.utils.translation import gettext_lazy
from rest_framework.exceptions import ErrorDetail
from rest_framework.renderers import JSONRenderer as DRFRenderer
from rest_framework.utils.serializer_helpers import ReturnDict, ReturnList

from config.renderers import JSONRenderer


@dataclasses.dataclass
class Point:
    x: int


WHEN = dt.datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
CASES = {
    "plain": {"data": {"seq": 1, "ok": True, "none": None, "text": "hello"}, "meta": {}},
    "unicode": {"text": "ünï — 😀 \u00a0 \x7f \x1f \"quoted\" back\\slash \n\t"},
    "line separators": {"text": "a\u2028b\u2029c"},
    "nested": {"list": [1, [2, [3, {"a": []}]]], "tuple": (1, 2), "empty": {}},
    "aware datetime": {"at": WHEN, "other": WHEN.astimezone(dt.timezone(dt.timedelta(hours=-3, minutes=-30)))},
    "naive datetime, date, time": {"at": WHEN.replace(tzinfo=None), "day": WHEN.date(), "time": dt.time(1, 2, 3, 4)},
    "decimal, timedelta, uuid, bytes": {
        "d": decimal.Decimal("1.50"), "td": dt.timedelta(seconds=90), "id": uuid.UUID(int=7), "b": b"raw",
    },
    "lazy, error detail, return dict/list": {
        "lazy": gettext_lazy("Not found."), "error": ErrorDetail("bad", code="invalid"),
        "rd": ReturnDict({"a": 1}, serializer=None), "rl": ReturnList([1], serializer=None),
    },
    "generator": {"gen": (i for i in range(2))},
    "integer keys (fallback)": {1: "a", "b": 2},
    "big integer (fallback)": {"n": 2**70},
    "bool and int subclasses": {"t": True, "n": 0, "neg": -(2**63)},
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_same_bytes_as_drf(name):
    ours = JSONRenderer().render(CASES[name])
    if name == "generator":  # generators are consumed: render each side from a fresh value
        CASES[name]["gen"] = (i for i in range(2))
    assert ours == DRFRenderer().render(CASES[name])


def test_floats_are_the_same_json_values():
    data = {"f": [0.1, 1.5, 1e16, 1e-7, -0.0, 123456.789]}
    assert json.loads(JSONRenderer().render(data)) == json.loads(DRFRenderer().render(data))


def test_what_drf_refuses_is_refused_the_same_way():
    with pytest.raises(UnicodeEncodeError):
        JSONRenderer().render({"text": "\ud800"})
    for value in (object(), Point(1)):  # orjson would encode a dataclass; DRF does not
        with pytest.raises(TypeError):
            DRFRenderer().render({"x": value})
        with pytest.raises(TypeError):
            JSONRenderer().render({"x": value})


def test_an_indented_request_gets_drf_rendering():
    data = {"a": [1, 2]}
    media = "application/json; indent=2"
    assert (
        JSONRenderer().render(data, media, {})
        == DRFRenderer().render(data, media, {})
        == b'{\n  "a": [\n    1,\n    2\n  ]\n}'
    )


def test_none_is_an_empty_body():
    assert JSONRenderer().render(None) == b""


@pytest.mark.django_db
def test_the_api_renders_with_it(owner_client, private_store):
    from rest_framework.settings import api_settings

    configured = api_settings.DEFAULT_RENDERER_CLASSES
    assert configured == [JSONRenderer]
    response = owner_client.get(f"/api/v1/memories/{private_store.pk}")
    assert isinstance(response.accepted_renderer, JSONRenderer)
