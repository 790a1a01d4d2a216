"""`rights_version`: bumped whenever who may read or write a user store may have narrowed (made private, a
reader grant revoked), so that a write judged before the change is judged again before it lands
(docs/access.md "Writes racing a removal"; projects and sections carry their own). A constant database
default: PostgreSQL adds the column without rewriting the table, and rows inserted by code that does not
name the column get 0.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('stores', '0005_store_deleted_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='store',
            name='rights_version',
            field=models.BigIntegerField(db_default=0, default=0, editable=False),
        ),
    ]
