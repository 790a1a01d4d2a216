"""The alternative `/mcp` mount that bench/mcp_calls.py measures against ours: a path-dispatching ASGI app.

``/mcp`` goes straight to one process-wide SDK ``StreamableHTTPSessionManager`` (stateless, JSON
responses, entered once in the ASGI lifespan, as the SDK's own Starlette app does); every other path
goes to Django's ASGI application. Django's middleware (request id, hostile-input screening, body
ceiling, Host check) does not run for ``/mcp`` here — that is the point of comparison. The tools are
the same (`config.mcp_server.SERVER`); they need a Django request for the caller's token and request
id, so one is built from the ASGI scope. Benchmark code only: not served by `bin/serve`.

    GUNICORN_WORKER_CLASS=asgi gunicorn -c config/gunicorn.conf.py bench.mcp_composition:application
"""

from __future__ import annotations

import contextlib
import io
import os

from asgiref.sync import sync_to_async

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application

django_application = get_asgi_application()

from django.core.handlers.asgi import ASGIRequest  # noqa: E402
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # noqa: E402

from config import mcp_server  # noqa: E402
from config.errors import new_request_id  # noqa: E402


def new_manager() -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(app=mcp_server.SERVER, stateless=True, json_response=True)


def compose(manager: StreamableHTTPSessionManager):
    """The path-dispatching HTTP app: ``/mcp`` to `manager` (already running), the rest to Django."""

    async def dispatch(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/mcp":
            request = ASGIRequest(scope, io.BytesIO())
            request.request_id = new_request_id()
            try:
                credentials = await sync_to_async(mcp_server.authenticate_bearer)(request)
            except Exception:
                credentials = None
            if credentials is None:
                start = {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                await send(start)
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
            await manager.handle_request({**scope, mcp_server.SCOPE_KEY: request}, receive, send)
            return
        await django_application(scope, receive, send)

    return dispatch


@contextlib.asynccontextmanager
async def running():
    """The composed app with its own running manager, for in-process measurement (no lifespan needed)."""
    manager = new_manager()
    async with manager.run():
        yield compose(manager)


_manager = new_manager()
_dispatch = compose(_manager)


async def application(scope, receive, send):
    """The ASGI entry point gunicorn's ASGI worker serves; the lifespan runs the one manager."""
    if scope["type"] == "lifespan":
        await receive()  # lifespan.startup
        async with _manager.run():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})
        return
    await _dispatch(scope, receive, send)
