"""A store's deletion hides it at once and purges its rows in batches (docs/decisions.md "Deleting a store of
any size"): `deleted_at`, and a partial index listing the stores still to purge. Adding a nullable column
rewrites nothing.
"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_records_write_to_memories_write'),
        ('stores', '0004_distributable'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='store',
            name='deleted_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='store',
            index=models.Index(condition=models.Q(('deleted_at__isnull', False)), fields=['deleted_at'], name='store_purge_queue'),
        ),
    ]
