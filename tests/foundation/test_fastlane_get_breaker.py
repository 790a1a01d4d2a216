"""Breaking the GET fast lanes (wake, zoom, recall: memories/api/views.py, config/fastlane.py).

Each test sends the same request through the real ASGI front (`config.asgi.application`) with the lanes on
and with them off (``API_FAST_LANES = []``, the plain DRF view), with the harness of
tests/foundation/test_fastlane.py, and states what the contract of config/fastlane.py promises: the view's
answer (status, headers, body) and nothing written that the view would not write. Every test here fails
against the lanes as committed; each docstring says what happens.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from accounts import authentication
from memories import selectors
from memories import services as memory_services
from stores.models import Store
from tests.factories import StoreFactory
from tests.foundation import test_fastlane as lanes_tests
from tests.foundation.test_fastlane import bearer, get, get_both, without_request_id

pytestmark = pytest.mark.django_db(transaction=True)

# The harness's fixtures: the front on one thread of its own, the cast, the Django-call counter, five entries.
one_thread, world, django_calls, logged = (
    lanes_tests.one_thread,
    lanes_tests.world,
    lanes_tests.django_calls,
    lanes_tests.logged,
)


def assert_same(on, off):
    (s1, h1, b1, r1), (s2, h2, b2, r2) = on, off
    assert s1 == s2, (s1, b1, s2, b2)
    assert list(h1.items()) == list(h2.items())
    assert without_request_id(b1, r1) == without_request_id(b2, r2)


# --- 1. `?format=` is an unknown query parameter, lanes on and off ------------------------------------


@pytest.mark.parametrize("what", ["wake", "zoom", "recall"])
def test_a_format_parameter_is_refused_after_authentication_lanes_on_and_off(settings, logged, django_calls, what):
    """``?format=xml``: DRF's URL format override is off (`URL_FORMAT_OVERRIDE: None`). It used to answer
    404 before authenticating, while the lane authenticated first (and wrote the token's last use). Now
    both authenticate and answer the serializer's 400 naming `format`; without a credential, the private
    store's 404, as without `format`."""
    path, auth = f"/api/v1/memories/{logged['store'].pk}/{what}", bearer(logged["secret"])
    on, off = get_both(settings, path, b"format=xml", auth)
    assert_same(on, off)
    assert off[0] == 400 and json.loads(off[2])["error"]["details"]["fields"] == {"format": "Unknown field."}, off
    on, off = get_both(settings, path, b"format=xml", {})
    assert_same(on, off)
    assert off[0] == 404 and json.loads(off[2])["error"]["message"] == "Store not found.", off
    plain = get(path)
    assert (plain[0], without_request_id(plain[2], plain[3])) == (off[0], without_request_id(off[2], off[3]))


# --- 2. a declined read waits for the database twice, within one request deadline ----------------------


def test_a_declined_read_under_a_slow_database_is_the_views_400_not_a_503(settings, logged, django_calls, monkeypatch):
    """A database answering the credential lookup in 0.8 s (simulated with pg_sleep before the real
    statement) and the request deadline (`DB_REQUEST_DEADLINE`) at 1.2 s. Lanes off, a recall with a bad
    pattern is the view's 400 after one lookup. Lanes on, the lane runs the lookup (0.8 s), the view raises
    InvalidPattern, the lane declines and Django runs the lookup again under the same deadline, armed once
    around the whole call (`config.asgi._call_django`): the watchdog cuts the connection in the second
    lookup and the answer is 503 overloaded_error. Every refusal of a GET lane (bad cursor, stranger's
    404, bad range) pays the database twice; "a hung database is never waited for twice" holds only for
    faults, and a slow database turns the view's 4xx into 503s."""
    real = authentication._TOKEN_WITH_STORE.first

    def slow_first(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(0.8)")
        return real(*args, **kwargs)

    monkeypatch.setattr(authentication._TOKEN_WITH_STORE, "first", slow_first)
    settings.DB_REQUEST_DEADLINE = 1.2
    path = f"/api/v1/memories/{logged['store'].pk}/recall"
    on, off = get_both(settings, path, b"pattern=(", bearer(logged["secret"]))
    assert off[0] == 400, off
    assert_same(on, off)


# --- 3. a store deleted while it is read --------------------------------------------------------------


@pytest.mark.parametrize(("what", "query"), [("wake", b""), ("zoom", b"range=0")])
def test_a_store_deleted_during_a_read_is_one_answer_lanes_on_and_off(
    settings, owner, make_client, django_calls, monkeypatch, what, query
):
    """The store is deleted by another request after the access check and before the lines are read
    (`selectors.render_lines`). Lanes off, `render_lines` raises KeyError (the entries went with the store)
    and the view answers 500 api_error (nap handles the same race: `memories.nap._jobs` -> 404). Lanes on,
    the lane's KeyError declines, Django runs the view again, the store is gone: 404. Same request, two
    answers; the lane hides a 500 of the view rather than answering as the view does. Expected: one answer,
    the 404 of a missing store (wake and zoom doing what nap does)."""
    secret = make_client(owner).secret
    stores = []
    for _ in range(2):
        store = StoreFactory(owner=owner, canonical=False)
        memory_services.append_entry(store=store, author=owner, body_md="x")
        stores.append(store)
    real = selectors.render_lines

    def deleting(store, blocks):
        Store.objects.filter(pk=store.pk).delete()  # … by another request, between the check and the read
        return real(store, blocks)

    monkeypatch.setattr(selectors, "render_lines", deleting)
    lanes, answers = settings.API_FAST_LANES, []
    for store, setting in zip(stores, (lanes, []), strict=True):
        settings.API_FAST_LANES = setting
        answers.append(get(f"/api/v1/memories/{store.pk}/{what}", query, bearer(secret)))
    settings.API_FAST_LANES = lanes
    (s1, _h1, b1, _r1), (s2, _h2, b2, _r2) = answers
    assert (s1, s2) == (404, 404), (json.loads(b1)["error"], json.loads(b2)["error"])
