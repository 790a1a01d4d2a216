"""The WSGI application for a plain WSGI server: Django with the request budgets of `config.database`.

`bin/serve` runs the ASGI front in `config.asgi` instead (which runs Django's WSGI handler on its thread
pool and applies the same budgets at startup).
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from config.database import apply_request_budgets  # noqa: E402  (needs the settings loaded above)
from config.middleware import ScreenedRequest  # noqa: E402

application.request_class = ScreenedRequest  # a Content-Type Django cannot take is a 400 (config.middleware)
apply_request_budgets()
