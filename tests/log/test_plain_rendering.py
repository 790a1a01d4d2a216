"""The plain renderings of wake, zoom and recall (issue 17) equal their serializers, the schema's source."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone
from rest_framework import serializers

from memories import selectors, tree
from memories.api import serializers as s
from memories.models import Entry
from tests.log.conftest import fill, put_summary, url

pytestmark = pytest.mark.django_db

ZONES = ["UTC", "Europe/Berlin", "America/St_Johns"]


def assert_same(fast, slow):
    assert fast == slow
    assert json.dumps(fast) == json.dumps(slow)  # the same keys in the same order, the same JSON


@pytest.fixture
def every_kind_of_line(owner_client, private_store):
    """100 entries: 0-63 and 68-69 summarised (non-ASCII text), 64-67 and 70-71 missing, entry 80
    redacted, times of whole seconds on some rows (no fraction in their ISO form)."""
    store = fill(private_store, 100, body=lambda seq: f"entrée {seq} 😀")
    put_summary(store, "0-63", "résumé 😀 of 0-63")
    put_summary(store, "68-69")
    assert owner_client.post(url(store, "entries/80/redact"), {"reason": "test"}).status_code == 200
    Entry.objects.filter(store=store, seq__in=[0, 63, 81]).update(created_at=timezone.now().replace(microsecond=0))
    store.refresh_from_db()
    return store


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("budget", [32, 128])
def test_wake_rendering_equals_the_serializer(every_kind_of_line, zone, budget):
    with timezone.override(zone):
        data = selectors.wake(store=every_kind_of_line, budget=budget)
        kinds = {line["kind"] for line in data["lines"]}
        assert {"entry", "redacted"} <= kinds and data["compaction"] is not None
        assert budget == 128 or kinds == {"summary", "missing", "entry", "redacted"}
        assert_same(s.render_wake(data), s.WakeDataSerializer(data).data)


@pytest.mark.parametrize("zone", ZONES)
def test_wake_rendering_of_a_complete_and_of_an_empty_store_equals_the_serializer(private_store, zone):
    with timezone.override(zone):
        empty = selectors.wake(store=private_store, budget=32)
        assert_same(s.render_wake(empty), s.WakeDataSerializer(empty).data)
        store = fill(private_store, 1)
        complete = selectors.wake(store=store, budget=32)
        assert complete["compaction"] is None
        assert_same(s.render_wake(complete), s.WakeDataSerializer(complete).data)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("label", ["0-63", "0-31", "64-71", "68-69", "70-71", "80", "81", "5", "80-81"])
def test_zoom_rendering_equals_the_serializer(every_kind_of_line, zone, label):
    with timezone.override(zone):
        block = tree.parse_range(label, allow_entry=True)
        data = selectors.zoom(store=every_kind_of_line, block=block)
        assert_same(s.render_zoom(data), s.ZoomDataSerializer(data).data)


class _Defaulted(serializers.Serializer):
    seq = serializers.IntegerField(default=0)


def test_a_serializer_with_a_field_it_cannot_render_plainly_is_refused():
    class Sourced(serializers.Serializer):
        author = serializers.CharField(source="author.handle")

    class Overridden(serializers.Serializer):
        class Upper(serializers.CharField):
            def to_representation(self, value):
                return value.upper()

        name = Upper()

    class Decimal(serializers.Serializer):
        amount = serializers.DecimalField(max_digits=5, decimal_places=2)

    for serializer in (Sourced, _Defaulted, Overridden, Decimal):
        with pytest.raises(TypeError):
            s.PlainRendering(serializer)


def test_a_missing_required_field_is_an_error_and_a_missing_optional_one_is_left_out():
    line = {"range": "0-1", "kind": "missing", "text": None}
    assert s.PlainRendering(s.LineSerializer).one(line) == s.LineSerializer(line).data
    with pytest.raises(KeyError):
        s.PlainRendering(s.LineSerializer).one({"kind": "missing", "text": None})  # `range`: required, not null
    nullable_missing = {"range": "0-1", "kind": "missing"}  # `text` is nullable: DRF renders None
    assert_same(s.PlainRendering(s.LineSerializer).one(nullable_missing), s.LineSerializer(nullable_missing).data)


class _NullableShapes(serializers.Serializer):
    text = serializers.CharField(allow_null=True)  # required, nullable: DRF renders a missing key as None
    maybe = serializers.IntegerField(required=False, allow_null=True)  # optional, nullable: also None
    optional = serializers.IntegerField(required=False)  # optional: left out
    nested = s.CompactionHintSerializer(allow_null=True)


def test_a_missing_nullable_field_renders_as_none_like_drf():
    """DRF's `Field.get_attribute` answers None for a missing key of a nullable field before it looks at
    `required` (breaker1: the plain rendering raised KeyError or left the key out)."""
    rendering = s.PlainRendering(_NullableShapes)
    assert_same(rendering.one({}), _NullableShapes({}).data)
    assert_same(rendering.many([{}, {"optional": 3}]), _NullableShapes([{}, {"optional": 3}], many=True).data)


# --- entries (the note's and the redaction's response): PlainObjectRendering -----------------------------


@pytest.mark.parametrize("zone", ZONES)
def test_entry_rendering_equals_the_serializer(every_kind_of_line, zone):
    """Stored entries (non-ASCII bodies, whole-second times, a redacted one with its redactor, with and
    without a client nonce) and a freshly appended one render as `EntrySerializer` renders them."""
    from memories import services

    store = every_kind_of_line
    appended = services.append_entry(store=store, author=store.owner, body_md="ünï 😀", client_nonce="n-1").entry
    entries = [*Entry.objects.filter(store=store, seq__in=[0, 1, 63, 80, 81]).order_by("seq"), appended]
    assert entries[3].redacted_by is not None and entries[3].body_md is None
    assert entries[0].created_at.microsecond == 0 and appended.client_nonce == "n-1"
    with timezone.override(zone):
        for entry in entries:
            assert_same(s.render_entry(entry), s.EntrySerializer(entry).data)


def test_object_rendering_follows_drf_on_the_way_to_a_source():
    """A failed walk is None for a nullable field, left out for an optional one and an AttributeError for
    a required one; a mapping or a method on the way is left to the serializer (DRF indexes or calls it)."""

    class Shapes(serializers.Serializer):
        who = serializers.CharField(source="author.handle", allow_null=True)
        maybe = serializers.CharField(source="author.handle", required=False)
        size = serializers.IntegerField()

    class Titled(Shapes):
        title = serializers.CharField()

    class Author:
        handle = "ada"

    class Item:
        def __init__(self, author, size=3):
            self.author, self.size = author, size

        def title(self):
            return "T"

    rendering, titled = s.PlainObjectRendering(Shapes), s.PlainObjectRendering(Titled)
    for item in (Item(Author()), Item(None), Item({"handle": "bob"})):
        assert_same(rendering.one(item), Shapes(item).data)
        assert_same(titled.one(item), Titled(item).data)
    assert rendering.one(Item(None)) == {"who": None, "size": 3}  # `maybe` left out
    assert titled.one(Item(None)) == {"who": None, "size": 3, "title": "T"}

    class Required(serializers.Serializer):
        who = serializers.CharField(source="author.handle")

    with pytest.raises(AttributeError):
        s.PlainObjectRendering(Required).one(Item(None))


def test_an_object_rendering_refuses_fields_that_read_more_than_their_source():
    """Related fields and nested serializers, defaults, a field's own get_attribute, and a method field
    without an explicit context (it could read a request's) are refused when the rendering is built."""

    class Method(serializers.Serializer):
        who = serializers.SerializerMethodField()

    class Nested(serializers.Serializer):
        line = s.LineSerializer()

    class Own(serializers.Serializer):
        class Looked(serializers.CharField):
            def get_attribute(self, instance):
                return "fixed"

        name = Looked()

    for serializer in (Method, Nested, _Defaulted, Own):
        with pytest.raises(TypeError):
            s.PlainObjectRendering(serializer)
