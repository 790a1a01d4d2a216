"""The WSGI application: Django with the request budgets of `config.database` applied.

`bin/serve` runs the ASGI front in `config.asgi` (which calls this application in its thread pool);
this module is also what any plain WSGI server would load.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from config.database import apply_request_budgets  # noqa: E402  (needs the settings loaded above)

apply_request_budgets()
