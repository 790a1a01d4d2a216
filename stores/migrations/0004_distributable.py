"""Distributable by store (issue 21): the canonical rule moves to a subject-keyed table; keys lead with store.

Existing canonical stores are copied into `stores_canonicalstore` before the three partial unique indexes
on `stores_store` are dropped (one transaction), so the rule holds throughout. Reversible: going back
recreates the indexes (the table still agrees with `Store.canonical`).
"""

from django.db import migrations, models

from config.distribution import rekey


def copy_canonical(apps, schema_editor):
    Store = apps.get_model("stores", "Store")
    CanonicalStore = apps.get_model("stores", "CanonicalStore")
    rows = Store.objects.filter(canonical=True).values_list("id", "scope", "owner_id", "project_id", "section_id")
    CanonicalStore.objects.bulk_create(
        [
            CanonicalStore(scope=scope, subject_id=owner or project or section, store_id=pk)
            for pk, scope, owner, project, section in rows.iterator()
        ],
        batch_size=5000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("stores", "0003_store_importing"),
    ]

    operations = [
        migrations.CreateModel(
            name="CanonicalStore",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "scope", "subject_id", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "scope",
                    models.CharField(
                        choices=[("user", "user"), ("project", "project"), ("board", "board")], max_length=8
                    ),
                ),
                ("subject_id", models.UUIDField()),
                ("store_id", models.UUIDField(unique=True)),
            ],
        ),
        migrations.AddConstraint(
            model_name="canonicalstore",
            constraint=models.CheckConstraint(
                condition=models.Q(("scope__in", ["user", "project", "board"])), name="canonical_scope_valid"
            ),
        ),
        migrations.RunPython(copy_canonical, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="store", name="store_one_canonical_per_user"),
        migrations.RemoveConstraint(model_name="store", name="store_one_canonical_per_project"),
        migrations.RemoveConstraint(model_name="store", name="store_one_canonical_per_section"),
        rekey("stores_readergrant", ("store_id", "id")),
    ]
