"""Environments and environment keys under /api/v1/environments (SPEC §5), for the owner's API token.

`client.beta.environments.create/retrieve/update/list/delete/archive` (anthropic 2.10.0); the key routes
are ours: `POST/GET /environments/{id}/keys`, `DELETE /environments/{id}/keys/{key_id}`.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.idempotency import replayable
from config.api import caller_key, reject_body, reject_query
from sessions import selectors
from sessions.api import inputs, objects
from sessions.api.common import ENVIRONMENT_ID, KEY_ID, keyset_page, validated
from sessions.services import environments as services
from sessions.services.common import UNSET

TAG = ["environments"]


class EnvironmentCollectionView(APIView):
    """GET (list) and POST (create) /environments."""

    takes_metadata = True  # a bad character in `metadata` is refused as invalid_metadata (config.parsers)

    @extend_schema(
        operation_id="environments_list",
        tags=TAG,
        parameters=[inputs.EnvironmentListQuerySerializer],
        responses={200: objects.EnvironmentPageSerializer},
        description="The caller's environments, newest first; archived ones only with include_archived=true.",
    )
    def get(self, request):
        query = validated(inputs.EnvironmentListQuerySerializer, request.query_params)
        rows, next_page = keyset_page(
            query,
            kind="environments",
            fingerprint={"include_archived": query["include_archived"]},
            caller=caller_key(request),
            fetch=lambda **page: selectors.environments_for(
                request.user, include_archived=query["include_archived"], **page
            ),
        )
        return objects.page(objects.EnvironmentSerializer, rows, next_page)

    @extend_schema(
        operation_id="environments_create",
        tags=TAG,
        request=inputs.EnvironmentCreateRequestSerializer,
        responses={200: objects.EnvironmentSerializer},
        description="Create a self-hosted environment owned by the caller (`config.type` must be "
        "`self_hosted`; other types are 400). Mint keys for its workers with POST …/keys.",
    )
    @replayable
    def post(self, request):
        reject_query(request)
        incoming = validated(inputs.EnvironmentCreateRequestSerializer, request.data)
        environment = services.create_environment(owner=request.user, **incoming)
        return objects.body(objects.EnvironmentSerializer, environment)


class EnvironmentDetailView(APIView):
    """GET (retrieve), POST (update) and DELETE /environments/{environment_id}."""

    takes_metadata = True  # a bad character in `metadata` is refused as invalid_metadata (config.parsers)

    @extend_schema(
        operation_id="environments_retrieve",
        tags=TAG,
        parameters=[ENVIRONMENT_ID],
        responses={200: objects.EnvironmentSerializer},
    )
    def get(self, request, environment_id):
        environment = selectors.get_environment_for(request.user, environment_id)
        reject_query(request)
        return objects.body(objects.EnvironmentSerializer, environment)

    @extend_schema(
        operation_id="environments_update",
        tags=TAG,
        parameters=[ENVIRONMENT_ID],
        request=inputs.EnvironmentUpdateRequestSerializer,
        responses={200: objects.EnvironmentSerializer},
        description="Absent fields are unchanged; `description: null` clears it; `metadata` is a patch (null "
        "or empty values delete keys). Archived environments: 400 `environment_archived`.",
    )
    def post(self, request, environment_id):
        environment = selectors.get_environment_for(request.user, environment_id)
        reject_query(request)
        incoming = validated(inputs.EnvironmentUpdateRequestSerializer, request.data)
        environment = services.update_environment(
            environment=environment,
            name=incoming.get("name", UNSET),
            config=incoming.get("config", UNSET),
            description=incoming.get("description", UNSET),
            metadata_patch=incoming.get("metadata", UNSET),
            scope=incoming.get("scope", UNSET),
        )
        return objects.body(objects.EnvironmentSerializer, environment)

    @extend_schema(
        operation_id="environments_delete",
        tags=TAG,
        parameters=[ENVIRONMENT_ID],
        responses={200: objects.EnvironmentDeletedSerializer},
        description="Deletes the environment with its keys and archived sessions; 409 `environment_in_use` "
        "while a session that is not archived uses it.",
    )
    def delete(self, request, environment_id):
        environment = selectors.get_environment_for(request.user, environment_id)
        reject_query(request)
        reject_body(request)
        services.delete_environment(environment=environment)
        return Response({"id": str(environment.pk), "type": "environment_deleted"})


class EnvironmentArchiveView(APIView):
    """POST /environments/{environment_id}/archive."""

    @extend_schema(
        operation_id="environments_archive",
        tags=TAG,
        parameters=[ENVIRONMENT_ID],
        request=None,
        responses={200: objects.EnvironmentSerializer},
        description="One-way: no new sessions may use it (its queued work can still be polled). Archiving an "
        "archived environment returns it unchanged.",
    )
    def post(self, request, environment_id):
        environment = selectors.get_environment_for(request.user, environment_id)
        reject_query(request)
        reject_body(request)
        environment, _changed = services.archive_environment(environment=environment)
        return objects.body(objects.EnvironmentSerializer, environment)


class EnvironmentKeyCollectionView(APIView):
    """GET (list, prefixes only) and POST (create; the secret is shown once) /environments/{id}/keys."""

    @extend_schema(
        operation_id="environments_keys_list",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, inputs.EnvironmentKeyListQuerySerializer],
        responses={200: objects.EnvironmentKeyPageSerializer},
        description="The environment's keys, revoked ones too, newest first; never their secrets.",
    )
    def get(self, request, environment_id):
        environment = selectors.get_environment_for(request.user, environment_id)
        query = validated(inputs.EnvironmentKeyListQuerySerializer, request.query_params)
        rows, next_page = keyset_page(
            query,
            kind="environment_keys",
            fingerprint={"environment": str(environment.pk)},
            caller=caller_key(request),
            fetch=lambda **page: selectors.environment_keys(environment, **page),
        )
        return objects.page(objects.EnvironmentKeySerializer, rows, next_page)

    @extend_schema(
        operation_id="environments_keys_create",
        tags=TAG,
        parameters=[ENVIRONMENT_ID],
        request=inputs.EnvironmentKeyCreateRequestSerializer,
        responses={200: objects.EnvironmentKeyCreatedSerializer},
        description="Mint a key for the environment's workers. `secret` is in this response only (the server "
        "keeps its SHA-256). The key authenticates this environment's work endpoints and nothing else.",
    )
    @replayable
    def post(self, request, environment_id):
        environment = selectors.get_environment_for(request.user, environment_id)
        reject_query(request)
        incoming = validated(inputs.EnvironmentKeyCreateRequestSerializer, request.data)
        issued = services.issue_environment_key(
            environment=environment, name=incoming.get("name", ""), created_by=request.user
        )
        return objects.body(objects.EnvironmentKeyCreatedSerializer, issued)


class EnvironmentKeyDetailView(APIView):
    """DELETE /environments/{environment_id}/keys/{key_id}: revoke."""

    @extend_schema(
        operation_id="environments_keys_revoke",
        tags=TAG,
        parameters=[ENVIRONMENT_ID, KEY_ID],
        responses={200: objects.EnvironmentKeySerializer},
        description="Revoke the key (it authenticates nobody from now on); revoking again returns it unchanged.",
    )
    def delete(self, request, environment_id, key_id):
        environment = selectors.get_environment_for(request.user, environment_id)
        reject_query(request)
        reject_body(request)
        key = services.revoke_environment_key(key=selectors.get_environment_key(environment, key_id))
        return objects.body(objects.EnvironmentKeySerializer, key)
