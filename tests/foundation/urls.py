"""A test-only URLconf: the real routes plus probe views that exercise the error handler."""

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from config.api import StrictSerializer, envelope
from config.urls import handler400, handler403, handler404, handler500
from config.urls import urlpatterns as real_urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


class ProbeSerializer(StrictSerializer):
    count = serializers.IntegerField(min_value=0)
    text = serializers.CharField(required=False)


class ProbeView(APIView):
    allow_anonymous_reads = True

    @extend_schema(exclude=True)
    def get(self, request):
        return envelope({"ok": True})

    @extend_schema(exclude=True)
    def post(self, request):
        incoming = ProbeSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        return envelope(incoming.validated_data, status=201)


class ExplodingView(APIView):
    allow_anonymous_reads = True

    @extend_schema(exclude=True)
    def get(self, request):
        raise RuntimeError("secret-internal-detail /etc/passwd")


def exploding_django_view(request):
    raise RuntimeError("secret-internal-detail in plain django")


urlpatterns = [
    path("probe", ProbeView.as_view()),
    path("explode", ExplodingView.as_view()),
    path("explode-django", exploding_django_view),
    *real_urlpatterns,
]
