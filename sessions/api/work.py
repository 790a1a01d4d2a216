"""The work queue under /api/v1/environments/{environment_id}/work (SPEC §5), as
`client.beta.environments.work` (anthropic 2.10.0) calls it, with the credential each SDK docstring names:

| operation | credential |
| --- | --- |
| poll, ack, list | the environment key |
| heartbeat, stop | the environment key, or the item's own per-work credential (the SDK worker's) |
| retrieve, update | the environment owner's API token |
| stats | the environment key or the owner's API token |

Reads settle lapsed leases first, so they report what a poll would see.
"""

from __future__ import annotations

from django.http import JsonResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.views import APIView

from config.api import caller_key, reject_body, reject_query
from sessions import selectors, validation
from sessions.api import inputs, objects
from sessions.api.common import ENVIRONMENT_ID, WORK_ID, WORKER_ID_HEADER, keyset_page, validated
from sessions.models import WorkClaim
from sessions.services import work as services
from sessions.services.common import UNSET

TAG = ["environments.work"]
ENVIRONMENT_KEY = ("environment_key",)
WORKER = ("environment_key", "work_credential")


def _claim(request) -> WorkClaim | None:
    return request.auth if isinstance(request.auth, WorkClaim) else None


class WorkCollectionView(APIView):
    """GET /environments/{environment_id}/work."""

    accepted_credentials = ENVIRONMENT_KEY

    @extend_schema(
        operation_id="environments_work_list",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, inputs.WorkListQuerySerializer],
        responses={200: objects.WorkPageSerializer},
        description="The environment's work items, newest first (environment key).",
    )
    def get(self, request, environment_id):
        environment = selectors.environment_for_request(request, environment_id)
        query = validated(inputs.WorkListQuerySerializer, request.query_params)
        services.settle_lapsed_leases(environment=environment)
        rows, next_page = keyset_page(
            query,
            kind="work",
            fingerprint={"environment": str(environment.pk)},
            caller=caller_key(request),
            fetch=lambda **page: selectors.work_items(environment, **page),
        )
        return objects.page(objects.WorkSerializer, rows, next_page)


class WorkPollView(APIView):
    """GET /environments/{environment_id}/work/poll."""

    accepted_credentials = ENVIRONMENT_KEY
    # No HEAD: Django answers HEAD with `get`, and a poll claims an item and mints its credential — a HEAD
    # (a proxy's probe, a link checker) claimed one nobody received and held it from workers for the reclaim
    # window (a breaker), as nap's HEAD once held compaction jobs.
    http_method_names = ["get", "options"]

    @extend_schema(
        operation_id="environments_work_poll",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, inputs.WorkPollQuerySerializer, WORKER_ID_HEADER],
        responses={
            200: OpenApiResponse(
                response=objects.NULLABLE_WORK_SCHEMA,
                description="The claimed work item with its `secret`, or the JSON `null` when there is none.",
            )
        },
        description="Claim the oldest claimable item (environment key). With `block_ms` (1–999) an empty queue "
        "is watched that long; items polled but not acknowledged `reclaim_older_than_ms` ago (default 5,000) "
        "are claimed again. Each claim mints a new per-work credential and ends the previous one. A key "
        "revoked while the poll waits ends it with 401, nothing claimed: a revoke always wins over a later claim.",
    )
    def get(self, request, environment_id):
        environment = selectors.environment_for_request(request, environment_id)
        query = validated(inputs.WorkPollQuerySerializer, request.query_params)
        worker_id = validation.clean_worker_id(request.headers.get("Anthropic-Worker-ID"))
        claimed = services.poll_work(
            environment=environment,
            block_ms=query.get("block_ms"),
            reclaim_older_than_ms=query["reclaim_older_than_ms"],
            worker_id=worker_id,
            key=request.auth,
        )
        if claimed is None:
            # 200 with the JSON body `null`: the only empty answer the SDK's poll() reads as None.
            return JsonResponse(None, safe=False)
        return objects.body(objects.WorkSerializer, claimed.work, secret=claimed.secret)


class WorkStatsView(APIView):
    """GET /environments/{environment_id}/work/stats."""

    accepted_credentials = ("api_token", "environment_key")

    @extend_schema(
        operation_id="environments_work_stats",
        tags=TAG,
        parameters=[ENVIRONMENT_ID],
        responses={200: objects.WorkQueueStatsSerializer},
        description="Queue depth, items polled but not acknowledged, the oldest queued time and the workers "
        "seen polling in the last 30 s (environment key or the owner's API token).",
    )
    def get(self, request, environment_id):
        environment = selectors.environment_for_request(request, environment_id)
        reject_query(request)
        services.settle_lapsed_leases(environment=environment)
        return objects.body(objects.WorkQueueStatsSerializer, selectors.queue_stats(environment))


class WorkDetailView(APIView):
    """GET (retrieve) and POST (update metadata) /environments/{environment_id}/work/{work_id}."""

    takes_metadata = True  # a bad character in `metadata` is refused as invalid_metadata (config.parsers)

    @extend_schema(
        operation_id="environments_work_retrieve",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, WORK_ID],
        responses={200: objects.WorkSerializer},
        description="One work item (the environment owner's API token; environment keys and per-work "
        "credentials get 401). `secret` is null here.",
    )
    def get(self, request, environment_id, work_id):
        environment = selectors.environment_for_request(request, environment_id)
        reject_query(request)
        services.settle_lapsed_leases(environment=environment)
        return objects.body(objects.WorkSerializer, selectors.work_for_request(request, environment, work_id))

    @extend_schema(
        operation_id="environments_work_update",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, WORK_ID],
        request=inputs.WorkUpdateRequestSerializer,
        responses={200: objects.WorkSerializer},
        description="Merge a metadata patch (a string upserts a key, null deletes it; without `metadata` nothing "
        "changes) — the owner's API token.",
    )
    def post(self, request, environment_id, work_id):
        environment = selectors.environment_for_request(request, environment_id)
        work = selectors.work_for_request(request, environment, work_id)
        reject_query(request)
        incoming = validated(inputs.WorkUpdateRequestSerializer, request.data)
        work = services.update_work_metadata(work=work, metadata_patch=incoming.get("metadata", {}))
        return objects.body(objects.WorkSerializer, work)


class WorkAckView(APIView):
    """POST /environments/{environment_id}/work/{work_id}/ack."""

    accepted_credentials = ENVIRONMENT_KEY

    @extend_schema(
        operation_id="environments_work_ack",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, WORK_ID],
        request=None,
        responses={200: objects.WorkSerializer},
        description="Acknowledge a claimed item: `queued` → `starting`, with a 60 s lease until the first "
        "heartbeat (environment key). Again on a `starting` item: unchanged.",
    )
    def post(self, request, environment_id, work_id):
        environment = selectors.environment_for_request(request, environment_id)
        work = selectors.work_for_request(request, environment, work_id)
        reject_query(request)
        reject_body(request)
        return objects.body(objects.WorkSerializer, services.acknowledge_work(work=work))


class WorkHeartbeatView(APIView):
    """POST /environments/{environment_id}/work/{work_id}/heartbeat."""

    accepted_credentials = WORKER

    @extend_schema(
        operation_id="environments_work_heartbeat",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, WORK_ID, inputs.WorkHeartbeatQuerySerializer],
        request=None,
        responses={200: objects.WorkHeartbeatSerializer, 412: objects.HeartbeatPreconditionErrorSerializer},
        description="Extend the lease (TTL clamped to 10–300 s) and move to `active`. A stale "
        "`expected_last_heartbeat`, or a credential whose claim ended, is 412 with the lease the server holds "
        "in `error.details.current_state`; with the item's own per-work credential, a repeat of the last "
        "successful heartbeat's expectation (a retry whose answer was lost) is that heartbeat again, not a 412. "
        "On `stopping`/`stopped` nothing is compared: 200 with `lease_extended: false`.",
    )
    def post(self, request, environment_id, work_id):
        environment = selectors.environment_for_request(request, environment_id)
        work = selectors.work_for_request(request, environment, work_id)
        query = validated(inputs.WorkHeartbeatQuerySerializer, request.query_params)
        reject_body(request)
        expected = query.get("expected_last_heartbeat")
        beat = services.heartbeat_work(
            work=work,
            claim=_claim(request),
            desired_ttl_seconds=query.get("desired_ttl_seconds"),
            expected_last_heartbeat=UNSET if expected is None else validation.parse_expected_heartbeat(expected),
        )
        return objects.body(objects.WorkHeartbeatSerializer, beat)


class WorkStopView(APIView):
    """POST /environments/{environment_id}/work/{work_id}/stop."""

    accepted_credentials = WORKER

    @extend_schema(
        operation_id="environments_work_stop",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, WORK_ID],
        request=inputs.WorkStopRequestSerializer,
        responses={200: objects.WorkSerializer},
        description="Graceful stop (`stopping`; the worker learns it from its next heartbeat) or, with "
        "`force` or on a queued item, `stopped` at once. Already stopped: 409 `work_stopped`.",
    )
    def post(self, request, environment_id, work_id):
        environment = selectors.environment_for_request(request, environment_id)
        work = selectors.work_for_request(request, environment, work_id)
        reject_query(request)
        incoming = validated(inputs.WorkStopRequestSerializer, request.data)
        return objects.body(
            objects.WorkSerializer, services.stop_work(work=work, claim=_claim(request), force=incoming["force"])
        )
