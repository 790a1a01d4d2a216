"""Distributable by store (issue 21): memories and versions keyed (store_id, id); the head reference too.

The memory → version foreign key was `current_version_id → versions_version(id)` (unique, not including
the store); it becomes `(store_id, current_version_id) → versions_version(store_id, id)`, deferred as
Django's were. Runs on existing rows (every memory's head is a version of its own store).
"""

import django.db.models.deletion
from django.db import migrations, models

from config.distribution import rekey

ADD_HEAD_FK = (
    'ALTER TABLE "versions_memory" ADD CONSTRAINT "memory_current_version_fk" '
    'FOREIGN KEY ("store_id", "current_version_id") REFERENCES "versions_version" ("store_id", "id") '
    "DEFERRABLE INITIALLY DEFERRED"
)
DROP_HEAD_FK = 'ALTER TABLE "versions_memory" DROP CONSTRAINT "memory_current_version_fk"'


class Migration(migrations.Migration):
    dependencies = [
        ("stores", "0004_distributable"),
        ("versions", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="memory",
            name="current_version",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="versions.version",
            ),
        ),
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.UniqueConstraint(
                models.F("store"), models.F("current_version"), name="memory_store_current_version_unique"
            ),
        ),
        rekey("versions_version", ("store_id", "id")),
        rekey("versions_memory", ("store_id", "id")),
        migrations.RunSQL(ADD_HEAD_FK, reverse_sql=DROP_HEAD_FK),
    ]
