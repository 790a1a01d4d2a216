"""Issue 17: file memories and versions lose their plain `store_id` index.

Both primary keys are (store_id, id) since 0002, so the single-column index repeated their prefix and
cost one more index insertion on every file write. Only the indexes go: the foreign keys are not dropped
and re-validated, which on a large table would scan it under lock.
"""

import django.db.models.deletion
from django.db import migrations, models

OLD_INDEXES = {  # Django's names for the fields' own indexes
    "versions_memory": "versions_memory_store_id_d227568a",
    "versions_version": "versions_version_store_id_41ba081d",
}


class Migration(migrations.Migration):
    dependencies = [
        ("stores", "0004_distributable"),
        ("versions", "0002_distributable"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name=model,
                    name="store",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name=related_name,
                        to="stores.store",
                    ),
                )
                for model, related_name in (("memory", "file_memories"), ("version", "memory_versions"))
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{index}"', f'CREATE INDEX IF NOT EXISTS "{index}" ON "{table}" ("store_id")'
                )
                for table, index in OLD_INDEXES.items()
            ],
        ),
    ]
