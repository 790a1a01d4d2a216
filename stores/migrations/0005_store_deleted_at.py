"""A store's deletion hides it at once and purges its rows in batches (docs/decisions.md "Deleting a store of
any size"): `deleted_at`, where the purge goes on (`purge_cursor`), and a partial index listing the stores
still to purge. Adding nullable columns rewrites nothing. A deleted store belongs to no subject any more
(owner, project and section cleared, so the subject can be deleted before the purge ends): the
scope/subject check admits that state.
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
        migrations.RemoveConstraint(
            model_name='store',
            name='store_scope_subject',
        ),
        migrations.AddField(
            model_name='store',
            name='deleted_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='store',
            name='purge_cursor',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='store',
            index=models.Index(condition=models.Q(('deleted_at__isnull', False)), fields=['deleted_at'], name='store_purge_queue'),
        ),
        migrations.AddConstraint(
            model_name='store',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('deleted_at__isnull', False), ('owner__isnull', True), ('project__isnull', True), ('section__isnull', True)), models.Q(('owner__isnull', False), ('project__isnull', True), ('scope', 'user'), ('section__isnull', True), ('visibility__isnull', False)), models.Q(('owner__isnull', True), ('project__isnull', False), ('scope', 'project'), ('section__isnull', True), ('visibility__isnull', True)), models.Q(('owner__isnull', True), ('project__isnull', True), ('scope', 'board'), ('section__isnull', False), ('visibility__isnull', True)), _connector='OR'), name='store_scope_subject'),
        ),
    ]
