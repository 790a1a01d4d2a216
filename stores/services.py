"""Write use-cases for stores (SPEC §3). Each owns its transaction and locks the store row first."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from stores.models import Store


@transaction.atomic
def archive_store(*, store: Store) -> tuple[Store, bool]:
    """Archive `store` (one-way). Returns ``(store, changed)``; an archived store is returned unchanged.

    Locks the store row; bumps `updated_at` when it archives (SPEC §3, MEMORY_STORES_API §6.9).
    """
    locked = Store.objects.select_for_update(of=("self",)).get(pk=store.pk)
    if locked.archived_at is not None:
        return locked, False
    now = timezone.now()
    locked.archived_at = now
    locked.updated_at = now
    locked.save(update_fields=["archived_at", "updated_at"])
    return locked, True
