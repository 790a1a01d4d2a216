"""`manage.py ensure_demo [--token-file PATH]`: make sure the demo user exists and print its demo token.

With `--token-file` (what `bin/serve` passes: `.data/demo-token`) the secret is kept in that file (mode
0600, in the git-ignored data folder) and reused on the next start while it still works, so a `ROG_TOKEN`
exported earlier keeps working across restarts. Earlier demo tokens are never revoked here.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from accounts import services
from accounts.models import ApiToken
from config.text import quoted


class Command(BaseCommand):
    help = (
        "Ensure the demo user (handle 'demo' by default) and print its demo token. With --token-file the "
        "same token is reused across starts while it is live; otherwise a new one is issued each time. "
        "Earlier demo tokens are never revoked (revoke them with `rog tokens revoke`)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--handle", default="demo")
        parser.add_argument("--token-file", default=None, help="Keep the demo secret in this file and reuse it.")

    def handle(self, *args, **options):
        try:
            user, created = services.ensure_user(handle=options["handle"], display_name="Demo agent")
        except ValidationError as exc:  # a handle the model refuses (`me`, UUID-shaped, bad characters)
            raise CommandError(f"--handle {quoted(options['handle'], 80)}: {' '.join(exc.messages)}") from None
        path = Path(options["token_file"]) if options["token_file"] else None
        secret = _kept_secret(path, user)
        if secret is not None:
            label = "the same as the last start"
        else:
            secret = services.issue_token(user=user, name="demo").secret
            label = "new; earlier demo tokens still work" if user.api_tokens.count() > 1 else "new"
            if path is not None:
                _keep_secret(path, secret)
        self.stdout.write(f"Demo user: {user.handle}{' (created)' if created else ''}")
        self.stdout.write(f"Demo token ({label}): {secret}")
        if path is not None:
            self.stdout.write(f"Kept in {path}: export ROG_TOKEN=$(cat {path})")


def _kept_secret(path: Path | None, user) -> str | None:
    """The secret stored in `path` if it is a live token of `user`; else None."""
    if path is None or not path.is_file():
        return None
    secret = path.read_text(encoding="utf-8", errors="replace").strip()
    token = ApiToken.objects.filter(digest=services.token_digest(secret), user=user).first()
    return secret if token is not None and token.is_usable() else None


def _keep_secret(path: Path, secret: str) -> None:
    """Write `secret` to `path`, readable by its owner only (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secret + "\n")
