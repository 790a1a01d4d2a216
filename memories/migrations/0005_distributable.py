"""Distributable by store (issue 21): entries, summaries, claims and imports keyed (store_id, id).

Their unique constraints already lead with the store; only the primary keys change. Runs on existing rows.
"""

from django.db import migrations

from config.distribution import rekey


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0004_claim"),
        ("stores", "0004_distributable"),
    ]

    operations = [
        rekey("memories_entry", ("store_id", "id")),
        rekey("memories_summary", ("store_id", "id")),
        rekey("memories_claim", ("store_id", "id")),
        rekey("memories_storeimport", ("store_id", "id")),
    ]
