"""nap claims (SPEC §4 nap / compact, "Claims") through the API: who claims, what others get, lapses, limit."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import TokenScope
from memories.models import Claim
from stores import services as store_services
from tests.factories import (
    ProjectFactory,
    ProjectMembershipFactory,
    ReaderGrantFactory,
    StoreFactory,
    UserFactory,
    project_store,
)
from tests.log.conftest import fill, put_summary, summary_text, url

pytestmark = pytest.mark.django_db


def nap(client, store, **query) -> dict:
    response = client.get(url(store, "nap"), query)
    assert response.status_code == 200, response.json()
    return response.json()


def ranges(body: dict) -> list[str]:
    return [job["range"] for job in body["data"]["jobs"]]


def submit(client, store, job) -> int:
    body = {
        "range": job["range"],
        "generation": job["generation"],
        "source_digest": job["source_digest"],
        "summary_md": summary_text(job),
        "model": "test-summariser-1",
    }
    return client.post(url(store, "compact"), body).status_code


@pytest.fixture
def project(owner):
    project = ProjectFactory()
    ProjectMembershipFactory(project=project, user=owner, role="owner")
    return project


@pytest.fixture
def colleague(project):
    user = UserFactory(handle="colleague")
    ProjectMembershipFactory(project=project, user=user, role="member")
    return user


@pytest.fixture
def shared_store(project, owner):
    """A project store with 8 entries that two writers (the owner and a colleague) share."""
    return fill(project_store(project), 8, author=owner)


@pytest.fixture
def two_agents(make_client, owner, colleague):
    return make_client(owner), make_client(colleague)


def test_a_writers_nap_claims_the_job_and_another_writer_gets_the_next(two_agents, shared_store):
    first, second = two_agents
    a = nap(first, shared_store)
    b = nap(second, shared_store)
    assert (a["data"]["job"]["range"], b["data"]["job"]["range"]) == ("0-1", "2-3")
    assert a["data"]["job"]["claimed_until"] and b["data"]["job"]["claimed_until"]
    claims = dict(Claim.objects.filter(store=shared_store).values_list("start", "claimant"))
    assert claims == {0: f"user:{first.user.pk}", 2: f"user:{second.user.pk}"}


def test_a_head_of_nap_claims_nothing(two_agents, shared_store):
    """HEAD ran `get`, and a writer's nap claims: a probe with a writer's token held the job for
    NAP_CLAIM_SECONDS and showed nobody (found by a breaker). Nap has no HEAD."""
    first, second = two_agents
    response = first.head(url(shared_store, "nap"))
    assert response.status_code == 405 and "HEAD" not in response["Allow"]
    assert not Claim.objects.exists()
    assert nap(second, shared_store)["data"]["job"] is not None


def test_the_claimants_repeated_nap_returns_its_own_job_again(two_agents, shared_store):
    first, second = two_agents
    job = nap(first, shared_store)["data"]["job"]
    nap(second, shared_store)
    again = nap(first, shared_store)["data"]["job"]
    assert again["range"] == job["range"] == "0-1"
    assert {k: v for k, v in again.items() if k != "claimed_until"} == {
        k: v for k, v in job.items() if k != "claimed_until"
    }
    assert again["claimed_until"] >= job["claimed_until"]  # a repeated nap renews the claim
    assert Claim.objects.filter(store=shared_store).count() == 2


def test_limit_returns_distinct_claimed_ranges_in_nap_order(two_agents, shared_store):
    first, second = two_agents
    body = nap(first, shared_store, limit=3)
    assert ranges(body) == ["0-1", "2-3", "4-5"]
    assert body["data"]["job"] == body["data"]["jobs"][0]
    rest = nap(second, shared_store, limit=16)
    assert ranges(rest) == ["6-7"]  # 0-3 and 4-7 are not ready: their children are missing
    assert Claim.objects.filter(store=shared_store).count() == 4


def test_when_everything_ready_is_claimed_by_others_job_is_null_with_retry_after(two_agents, shared_store, settings):
    settings.NAP_CLAIM_SECONDS = 120
    first, second = two_agents
    nap(first, shared_store, limit=16)
    body = nap(second, shared_store)
    assert body["data"]["job"] is None and body["data"]["jobs"] == []
    assert body["data"]["complete"] is False
    assert body["meta"]["pending"] == 7 and 119 <= body["meta"]["retry_after"] <= 120


def test_others_get_a_higher_level_job_when_the_lowest_level_is_claimed(two_agents, shared_store):
    first, second = two_agents
    jobs = nap(first, shared_store, limit=2)["data"]["jobs"]
    assert [submit(first, shared_store, job) for job in jobs] == [201, 201]
    nap(first, shared_store, limit=2)  # claims 4-5 and 6-7
    assert ranges(nap(second, shared_store)) == ["0-3"]


def test_compact_releases_the_claim_and_the_claimant_moves_on(two_agents, shared_store):
    first, _ = two_agents
    job = nap(first, shared_store)["data"]["job"]
    assert submit(first, shared_store, job) == 201
    assert not Claim.objects.filter(store=shared_store, start=0, end=1).exists()
    assert nap(first, shared_store)["data"]["job"]["range"] == "2-3"


def test_anyone_may_still_compact_a_claimed_range_and_that_clears_the_claim(two_agents, shared_store):
    first, second = two_agents
    job = nap(first, shared_store)["data"]["job"]
    assert submit(second, shared_store, job) == 201  # claims are advisory
    assert not Claim.objects.filter(store=shared_store).exists()
    assert nap(first, shared_store)["data"]["job"]["range"] == "2-3"  # its own claim is gone with the range


def test_a_lapsed_claim_goes_to_the_next_caller(two_agents, shared_store, settings):
    settings.NAP_CLAIM_SECONDS = 1
    first, second = two_agents
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"
    time.sleep(1.1)
    assert nap(second, shared_store)["data"]["job"]["range"] == "0-1"
    assert Claim.objects.get(store=shared_store, start=0).claimant == f"user:{second.user.pk}"


def test_forget_drops_every_claim_of_the_store(make_client, owner, private_store):
    client = make_client(owner)
    store = fill(private_store, 8)
    nap(client, store, limit=4)
    assert Claim.objects.filter(store=store).count() == 4
    assert client.post(url(store, "forget"), {"range": "0", "generation": 1}).status_code == 200
    assert not Claim.objects.filter(store=store).exists()


def test_claims_of_an_older_generation_do_not_count(two_agents, shared_store):
    first, second = two_agents
    nap(first, shared_store, limit=16)
    Claim.objects.filter(store=shared_store).update(generation=0)  # as if issued before a forget
    assert ranges(nap(second, shared_store, limit=2)) == ["0-1", "2-3"]


def test_a_reader_naps_without_claiming(make_client, owner, reader, filled_store):
    ReaderGrantFactory(store=filled_store, user=reader)
    body = nap(make_client(reader), filled_store)
    assert body["data"]["job"]["range"] == "0-1" and body["data"]["job"]["claimed_until"] is None
    assert not Claim.objects.exists()
    assert nap(make_client(owner), filled_store)["data"]["job"]["range"] == "0-1"


def test_a_token_without_memories_write_naps_without_claiming(make_client, owner, filled_store):
    read_only = make_client(owner, scopes=[TokenScope.AGENT_READ.value])
    body = nap(read_only, filled_store, limit=2)
    assert ranges(body) == ["0-1", "2-3"] and {j["claimed_until"] for j in body["data"]["jobs"]} == {None}
    assert not Claim.objects.exists()


def test_readers_skip_ranges_claimed_by_writers(make_client, owner, reader, filled_store):
    ReaderGrantFactory(store=filled_store, user=reader)
    nap(make_client(owner), filled_store)
    assert nap(make_client(reader), filled_store)["data"]["job"]["range"] == "2-3"


def test_anonymous_naps_on_a_public_store_claim_nothing(anon_client, public_store):
    fill(public_store, 4)
    assert nap(anon_client, public_store)["data"]["job"]["claimed_until"] is None
    assert not Claim.objects.exists()


@pytest.mark.parametrize("claimed_first", [False, True])
def test_an_archived_store_hands_out_no_job(owner_client, make_client, reader, filled_store, claimed_first):
    """No summary can be stored in an archived store (compact is 409 store_archived): a nap used to hand
    out jobs whose model work was then refused, and a claim made before the archiving answered "retry in
    300 s" (found by a breaker). Every caller's nap is 409 store_archived; nothing is claimed."""
    ReaderGrantFactory(store=filled_store, user=reader)
    if claimed_first:
        nap(owner_client, filled_store, limit=2)
    store_services.archive_store(store=filled_store)
    claims = Claim.objects.count()
    for client in (owner_client, make_client(reader)):
        response = client.get(url(filled_store, "nap"))
        assert response.status_code == 409, response.content
        assert response.json()["error"]["details"]["reason"] == "store_archived"
        assert response["x-should-retry"] == "false"
    assert Claim.objects.count() == claims


def test_a_claim_beyond_the_snapshot_is_not_returned(owner_client, filled_store):
    nap(owner_client, filled_store, limit=4)  # 0-1 … 6-7
    assert ranges(nap(owner_client, filled_store, snapshot=4, limit=4)) == ["0-1", "2-3"]


def test_deleting_the_store_deletes_its_claims(owner_client, filled_store):
    nap(owner_client, filled_store, limit=2)
    response = owner_client.delete(url(filled_store, "").rstrip("/") + "?expected_entry_count=8&generation=1")
    assert response.status_code in (200, 204), response.content
    assert not Claim.objects.exists()


@pytest.mark.parametrize("limit", ["0", "17", "-1", "1.5", "x", "", "%00", "1%00", "99999999999999999999"])
def test_nap_rejects_a_bad_limit_and_claims_nothing(owner_client, filled_store, limit):
    response = owner_client.get(url(filled_store, "nap") + f"?limit={limit}")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert not Claim.objects.exists()


def _nap_queries(client, store, **query) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url(store, "nap"), query)
    assert response.status_code == 200 and response.json()["data"]["jobs"]
    return len(queries)


@pytest.mark.slow
def test_nap_query_count_is_the_same_at_a_hundred_and_thirty_thousand_entries(make_client, owner, private_store):
    client = make_client(owner)
    small = fill(private_store, 100)
    big = fill(StoreFactory(owner=owner, canonical=False), 30_000)
    put_summary(big, "0-16383")  # old history compacted (what lies inside it is not read)
    nap(client, fill(StoreFactory(owner=owner, canonical=False), 4))  # warm-up: token last-use write
    counts = {
        name: [_nap_queries(client, store, limit=limit) for limit in (1, 1, 16, 16)]  # claim, own again, …
        for name, store in (("small", small), ("big", big))
    }
    assert counts["small"] == counts["big"]
    assert max(counts["small"]) <= 6  # token, store, claims, frontier, claim upsert, children


@pytest.mark.slow
def test_a_readers_nap_query_count_is_the_same_in_both_frontier_strategies(make_client, owner, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    client = make_client(reader)
    few = fill(private_store, 64)  # 63 pending: every missing range is walked
    many = fill(StoreFactory(owner=owner, canonical=False), 5_000)  # 4,995 pending: scanned from the origin
    ReaderGrantFactory(store=many, user=reader)
    nap(client, few)
    assert _nap_queries(client, few) == _nap_queries(client, many) <= 5  # token, store, claims, frontier, children


@pytest.mark.parametrize("limit", [0, 17, True, "2", None])
def test_the_nap_service_refuses_a_bad_limit_from_any_surface(filled_store, limit):
    from config.errors import InvalidRequest
    from memories import nap as nap_service

    with pytest.raises(InvalidRequest, match="limit"):
        nap_service.nap(store=filled_store, claimant=None, limit=limit)


def _age_claim(store, start: int, seconds: float, *, renewed: bool = False) -> None:
    """Move the claim on `start` `seconds` into the past, as time passing would; `renewed`: only its first
    claim (`claimed_at`), as if its claimant had napped all along."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memories_claim SET claimed_at = claimed_at - make_interval(secs => %s), "
            "expires_at = expires_at - make_interval(secs => %s) WHERE store_id = %s AND start = %s",
            [seconds, 0 if renewed else seconds, store.pk, start],
        )


def test_renewing_never_holds_a_range_past_the_hold_cap_then_another_agent_gets_it(two_agents, shared_store, settings):
    """An agent that keeps napping (its model failing the job, say) renewed its claim forever, so nobody else
    was ever given the range and `retry_after` promised a lapse that never came (a tester). A claimant
    holds a range at most NAP_CLAIM_MAX_SECONDS from its first claim; then the range goes to the others, and
    the claimant cannot take it again for one NAP_CLAIM_SECONDS."""
    settings.NAP_CLAIM_SECONDS, settings.NAP_CLAIM_MAX_SECONDS = 100, 300
    first, second = two_agents
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"
    assert ranges(nap(second, shared_store, limit=3)) == ["2-3", "4-5", "6-7"]  # nothing else is ready

    _age_claim(shared_store, 0, 250, renewed=True)  # 250 s into its hold: a renewal adds 50 s, not 100
    renewed = nap(first, shared_store)["data"]["job"]
    held = Claim.objects.get(store=shared_store, start=0)
    assert renewed["range"] == "0-1" and held.expires_at == held.claimed_at + timedelta(seconds=300)
    assert renewed["claimed_until"] == held.expires_at.isoformat().replace("+00:00", "Z")
    blocked = nap(second, shared_store, limit=4)  # the colleague's own three come back; 0-1 is held
    assert "0-1" not in ranges(blocked)

    _age_claim(shared_store, 0, 60)  # the hold has ended (10 s ago), however often the claimant naps
    again = nap(first, shared_store)
    assert again["data"]["job"] is None and again["meta"]["retry_after"] in (90, 91)  # its cool-down
    assert Claim.objects.get(store=shared_store, start=0).claimant == f"user:{first.user.pk}"  # not renewed
    taken = nap(second, shared_store, limit=4)
    assert "0-1" in ranges(taken)
    assert Claim.objects.get(store=shared_store, start=0).claimant == f"user:{second.user.pk}"


def test_after_its_cool_down_a_claimant_may_take_the_range_again(two_agents, shared_store, settings):
    settings.NAP_CLAIM_SECONDS, settings.NAP_CLAIM_MAX_SECONDS = 100, 300
    first, _ = two_agents
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"
    _age_claim(shared_store, 0, 250, renewed=True)
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"  # renewed to its cap
    _age_claim(shared_store, 0, 70)  # the hold ended at its cap 20 s ago: cooling down
    assert nap(first, shared_store)["data"]["job"]["range"] == "2-3"  # not 0-1
    _age_claim(shared_store, 0, 100)  # the cool-down is over
    assert ranges(nap(first, shared_store, limit=2)) == ["0-1", "2-3"]
    held = Claim.objects.get(store=shared_store, start=0)
    assert held.expires_at == held.claimed_at + timedelta(seconds=100)  # a fresh claim: a new hold begins


def test_a_claim_that_lapsed_before_its_cap_leaves_no_cool_down(two_agents, shared_store, settings):
    """Only a hold cut at its cap cools down: an agent that napped once, went away (a crash, a restart) and
    comes back after its claim lapsed gets the range again at once, even past the cap's time (a tester: a
    first version judged the cool-down by the clock alone and told it someone held the range)."""
    settings.NAP_CLAIM_SECONDS, settings.NAP_CLAIM_MAX_SECONDS = 100, 300
    first, _ = two_agents
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"
    _age_claim(shared_store, 0, 350)  # lapsed 250 s ago, never renewed; its cap's time was 50 s ago
    body = nap(first, shared_store)
    assert body["data"]["job"]["range"] == "0-1" and "retry_after" not in body["meta"]


def test_with_the_cap_equal_to_the_claim_time_a_lapsed_claim_is_taken_again_at_once(two_agents, shared_store, settings):
    """A claim never extended past its first period is not a cut hold, even when that period is the cap (a
    tester: with the two settings equal every lapse cooled down)."""
    settings.NAP_CLAIM_SECONDS, settings.NAP_CLAIM_MAX_SECONDS = 100, 100
    first, _ = two_agents
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"
    held = Claim.objects.get(store=shared_store, start=0)
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"  # a nap does not extend it
    assert Claim.objects.get(store=shared_store, start=0).expires_at == held.expires_at
    _age_claim(shared_store, 0, 150)
    assert nap(first, shared_store)["data"]["job"]["range"] == "0-1"


def test_claim_settings_are_bounded_so_the_statements_integers_cannot_overflow():
    """NAP_CLAIM_SECONDS=10^9 with its default cap made every renewal a 500 (integer out of range, a tester)."""
    import subprocess
    import sys
    from pathlib import Path

    code = "from django.conf import settings as s; print(s.NAP_CLAIM_SECONDS, s.NAP_CLAIM_MAX_SECONDS)"
    for env, expected in (
        ({"NAP_CLAIM_SECONDS": "1000000000"}, "86400 259200"),
        ({"NAP_CLAIM_MAX_SECONDS": "9" * 12}, "300 2592000"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", f"import django; django.setup(); {code}"],
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.split() == expected.split(), done.stderr
