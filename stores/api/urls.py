"""Store-level Memories endpoints, universal search (filled by the stores issue)."""

urlpatterns: list = []
