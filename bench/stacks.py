"""ASGI entry points used only to measure candidate serving stacks (issue 16; see docs/decisions.md).

`a2wsgi_app` runs Django's WSGI application in a thread pool behind an ASGI server (the `a2wsgi`
adapter), so ASGI servers can be compared with gunicorn's gthread worker on the same Django code.
Needs `a2wsgi` (and the server under test) installed; nothing in the product imports this module.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from a2wsgi import WSGIMiddleware

from config.wsgi import application

a2wsgi_app = WSGIMiddleware(application, workers=int(os.environ.get("WEB_THREADS", "8")))
