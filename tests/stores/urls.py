"""Test URLconf: the real routes plus a probe of the store-level write right.

The log's write endpoints (`note`, `compact`) arrive on another branch; until then this probe runs the
exact check they use — `stores.selectors.get_store_for(user, id, need="write")` — behind the real
authentication, scope permission and error handling.
"""

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from config.api import envelope
from config.urls import handler400, handler403, handler404, handler500
from config.urls import urlpatterns as real_urlpatterns
from stores.selectors import get_store_for

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


class WriteProbeView(APIView):
    @extend_schema(exclude=True)
    def post(self, request, pk):
        store = get_store_for(request.user, pk, need="write")
        return envelope({"id": str(store.pk)})


urlpatterns = [
    path("probe/stores/<str:pk>/write", WriteProbeView.as_view()),
    *real_urlpatterns,
]
