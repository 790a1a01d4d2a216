from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The real-input demo (issue 9): `manage.py demo_real_input`. No models."""

    name = "demo"
    verbose_name = "Real-input demo"
