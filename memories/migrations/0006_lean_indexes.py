"""Issue 17: `memories_entry.redacted_by_id` gets a partial index (only redacted entries have one).

Every append paid an index insertion for a NULL. The partial index still serves the user-delete lookup
(``redacted_by_id = X``). Only the index changes: the foreign key is not dropped and re-validated, which
on a large table would scan it under lock.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

OLD_INDEX = "memories_entry_redacted_by_id_2cf0c5bf"  # Django's name for the field's own index


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0005_distributable"),
        ("stores", "0004_distributable"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="entry",
                    name="redacted_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{OLD_INDEX}"',
                    f'CREATE INDEX IF NOT EXISTS "{OLD_INDEX}" ON "memories_entry" ("redacted_by_id")',
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="entry",
            index=models.Index(
                condition=models.Q(("redacted_by__isnull", False)), fields=["redacted_by"], name="entry_redacted_by"
            ),
        ),
    ]
