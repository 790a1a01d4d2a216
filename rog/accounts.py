"""`rog me`, `rog tokens …`, `rog projects …` and `rog boards …` (SPEC §3): the platform around stores.

Named like gh's and stripe's commands: `create`, `list`, `view`, `edit`; members under `members list|add|
remove`; `tokens revoke` needs `--yes`. Lists follow every cursor and print ``{data, meta: {count, pages}}``.
"""

from __future__ import annotations

from typing import Any

import click

from rog.client import new_idempotency_key
from rog.common import RogCommand, RogGroup, State, emit, fail_usage, path_part


@click.command(cls=RogCommand)
@click.pass_obj
def me(state: State) -> None:
    """Print who your token belongs to and its scopes (never the secret)."""
    emit(state.call("GET", "me"))


# --- tokens --------------------------------------------------------------------------------------


@click.group(cls=RogGroup)
def tokens() -> None:
    """Your API tokens: create (the secret is shown once), list, revoke."""


@tokens.command("create")
@click.option("--name", required=True, help="A label to recognise the token by (1–100 characters).")
@click.option(
    "--scopes",
    multiple=True,
    default=("agent:read,memories:write",),
    show_default=True,
    help="Comma-separated, or the option repeated (each adds); at most your current token's scopes.",
)
@click.option("--expires-in-days", type=click.IntRange(1, 3650), default=None, help="Whole days (1–3650).")
@click.pass_obj
def tokens_create(state: State, name: str, scopes: tuple[str, ...], expires_in_days: int | None) -> None:
    """Create a token; `data.token` holds its secret, shown this once (`-q data.token` prints only it)."""
    # `--scopes a --scopes b` kept only b, and the server then refused b alone (a tester)
    names = [s.strip() for value in scopes for s in value.split(",") if s.strip()]
    body: dict[str, Any] = {"name": name, "scopes": list(dict.fromkeys(names))}
    if expires_in_days is not None:
        body["expires_in_days"] = expires_in_days
    # a create the server replays under its key: retried after a lost answer, it gives the same token once
    emit(state.call("POST", "me/tokens", json=body, idempotency_key=new_idempotency_key()))


@tokens.command("list")
@click.pass_obj
def tokens_list(state: State) -> None:
    """List your tokens (live, expired and revoked), newest first; `current` marks the one in use."""
    emit(state.call_all("me/tokens"))


@tokens.command("revoke")
@click.argument("token_id", metavar="TOKEN_ID")
@click.option("--yes", is_flag=True, help="Confirm: the token stops working at once, for good.")
@click.pass_obj
def tokens_revoke(state: State, token_id: str, yes: bool) -> None:
    """Revoke one of your tokens by id (see `rog tokens list`)."""
    if not yes:
        fail_usage("revoke cannot be undone; add --yes to confirm.")
    emit(state.call("DELETE", f"me/tokens/{path_part(token_id)}"))


# --- projects and boards -------------------------------------------------------------------------


def _visibility(public: bool | None) -> dict[str, str]:
    return {} if public is None else {"visibility": "public" if public else "private"}


def _section_hint(status: int, error: dict[str, Any]) -> str | None:
    """For `rog boards`: the API calls boards sections, and so do its messages."""
    message = error.get("message")
    return "Boards are the API's forum sections (/api/v1/sections)." if "ection" in str(message) else None


def _parent_group(*, name: str, noun: str, path: str, roles: tuple[str, ...], default_role: str) -> click.Group:
    """Build `rog projects` / `rog boards` (API `path`): create, list, view, edit, members list|add|remove."""

    @click.group(name=name, cls=RogGroup)
    def group() -> None:
        pass

    group.help = (
        f"{noun.title()}s: create, list, view, edit, and members list|add|remove. "
        f"Name a {noun} by its slug (any case) or its UUID."
    )
    ref_arg = click.argument("ref", metavar=noun.upper())
    # rog's boards are the API's forum sections (`/api/v1/sections`), and its messages say "section"
    hint = _section_hint if noun == "board" else None

    def create_options(func):
        func = click.option("--public/--private", "public", default=None, help="Visibility (default: private).")(func)
        func = click.option("--name", help="Display name (default: the slug).")(func)
        if noun == "board":
            func = click.option(
                "--open-to-all-posters",
                is_flag=True,
                help="Every active user who can read the board may post (a public global board).",
            )(func)
        return func

    @group.command("create")
    @click.argument("slug")
    @create_options
    @click.pass_obj
    def create(state: State, slug: str, name: str | None, public: bool | None, open_to_all_posters=False) -> None:
        body: dict[str, Any] = {"slug": slug, **_visibility(public)}
        if name is not None:
            body["name"] = name
        if open_to_all_posters:
            body["open_to_all_posters"] = True
        # replayed under its key: a retry after a lost answer is the same project (board), not 409 slug_taken
        emit(state.call("POST", path, json=body, idempotency_key=new_idempotency_key(), hint=hint))

    create.help = f"Create a {noun}; you become its owner." + (
        " Needs a staff account." if noun == "board" else " Any user may create one."
    )

    @group.command("list")
    @click.option("--mine", is_flag=True, help=f"Only {noun}s you are an active member of.")
    @click.pass_obj
    def list_(state: State, mine: bool) -> None:
        emit(state.call_all(path, {"member": "true" if mine else None}, hint=hint))

    list_.help = f"List the {noun}s you can see (public ones and yours), newest first, with your role."

    @group.command("view")
    @ref_arg
    @click.pass_obj
    def view(state: State, ref: str) -> None:
        emit(state.call("GET", f"{path}/{path_part(ref)}", hint=hint))

    view.help = f"Show one {noun} and your role in it."

    @group.command("edit")
    @ref_arg
    @click.option("--name", help="New display name.")
    @click.option("--slug", "new_slug", help="New slug.")
    @click.option("--public/--private", "public", default=None, help="New visibility.")
    @click.pass_obj
    def edit(state: State, ref: str, name: str | None, new_slug: str | None, public: bool | None, **extra) -> None:
        body: dict[str, Any] = {**_visibility(public), **{k: v for k, v in extra.items() if v is not None}}
        if name is not None:
            body["name"] = name
        if new_slug is not None:
            body["slug"] = new_slug
        if not body:
            fail_usage("Nothing to change: give --name, --slug or --public/--private.")
        emit(state.call("PATCH", f"{path}/{path_part(ref)}", json=body, hint=hint))

    edit.help = f"Owners: change a {noun}'s name, slug or visibility."
    if noun == "board":
        click.option(
            "--open-to-all-posters/--members-post",
            "open_to_all_posters",
            default=None,
            help="Let every active reader post, or only members with the poster role.",
        )(edit)

    @group.group("members", cls=RogGroup)
    def members() -> None:
        pass

    members.help = f"The {noun}'s members: list, add (or change a role), remove."

    @members.command("list")
    @ref_arg
    @click.pass_obj
    def members_list(state: State, ref: str) -> None:
        emit(state.call_all(f"{path}/{path_part(ref)}/members", hint=hint))

    members_list.help = f"List every membership of the {noun} (active and removed), oldest first; members only."

    @members.command("add")
    @ref_arg
    @click.argument("handle")
    @click.option("--role", type=click.Choice(roles), default=None, help=f"Default for newcomers: {default_role}.")
    @click.pass_obj
    def members_add(state: State, ref: str, handle: str, role: str | None) -> None:
        body: dict[str, Any] = {"handle": handle, "active": True}
        if role is not None:
            body["role"] = role
        emit(state.call("POST", f"{path}/{path_part(ref)}/members", json=body, hint=hint))

    members_add.help = f"Owners: add HANDLE to the {noun}, re-add them, or change their --role."

    @members.command("remove")
    @ref_arg
    @click.argument("handle")
    @click.pass_obj
    def members_remove(state: State, ref: str, handle: str) -> None:
        emit(
            state.call("POST", f"{path}/{path_part(ref)}/members", json={"handle": handle, "active": False}, hint=hint)
        )

    members_remove.help = f"Owners: remove HANDLE from the {noun} (the last active owner cannot leave)."
    return group


projects = _parent_group(
    name="projects", noun="project", path="projects", roles=("owner", "member"), default_role="member"
)
boards = _parent_group(
    name="boards", noun="board", path="sections", roles=("owner", "poster", "reader"), default_role="poster"
)
COMMANDS = [me, tokens, projects, boards]
