"""GET /memories: the public directory as Markdown, JSON or YAML (SPEC §8)."""

from __future__ import annotations

import re
from html import unescape

import pytest
import yaml

from accounts.models import Visibility
from memories.models import Entry
from tests.factories import ProjectFactory, SectionFactory, StoreFactory, board_store, project_store
from tests.stores.helpers import assert_error

pytestmark = pytest.mark.django_db

SECRET = "xylophonics"


@pytest.fixture
def directory_world(owner, cast):
    """Public and private stores of every scope, each with a secret entry."""
    stores = {
        "public_user": StoreFactory(owner=owner, canonical=False, name="Public notes", visibility=Visibility.PUBLIC),
        "private_user": StoreFactory(owner=owner, name="Private notes"),
        "public_project": project_store(ProjectFactory(visibility=Visibility.PUBLIC), name="Open project"),
        "private_project": project_store(cast.project, name="Closed project"),
        "public_board": board_store(SectionFactory(visibility=Visibility.PUBLIC), name="Open board"),
        "private_board": board_store(SectionFactory(visibility=Visibility.PRIVATE), name="Closed board"),
    }
    for store in stores.values():
        Entry.objects.create(store=store, seq=0, author=owner, body_md=f"{SECRET} {store.name}", size_bytes=30)
    return stores


def public_ids(world) -> set[str]:
    return {str(store.pk) for key, store in world.items() if key.startswith("public")}


def test_json_lists_public_stores_only(anon_client, directory_world):
    response = anon_client.get("/memories.json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    data = response.json()["data"]
    assert {item["id"] for item in data} == public_ids(directory_world)
    assert all(item["visibility"] == "public" for item in data)
    assert "permissions" not in data[0]
    assert SECRET not in response.content.decode()


def test_markdown_is_the_default(anon_client, directory_world):
    response = anon_client.get("/memories")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    text = response.content.decode()
    assert text.startswith("# Public memories")
    assert "Public notes" in text and "Open project" in text and "Open board" in text
    assert "Private notes" not in text and "Closed" not in text
    assert SECRET not in text


def test_yaml_by_suffix_and_by_accept(anon_client, directory_world):
    by_suffix = anon_client.get("/memories.yaml")
    by_accept = anon_client.get("/memories", HTTP_ACCEPT="application/yaml")
    for response in (by_suffix, by_accept):
        assert response.status_code == 200
        assert response["Content-Type"].startswith("application/yaml")
        body = yaml.safe_load(response.content)
        assert {item["id"] for item in body["data"]} == public_ids(directory_world)
        assert SECRET not in response.content.decode()


@pytest.mark.parametrize("media_type", ["text/yaml", "application/x-yaml"])
def test_the_older_yaml_names_are_served_as_asked_and_documented(anon_client, directory_world, media_type):
    """Served under the name asked for, which /openapi.yaml did not list (a tester)."""
    response = anon_client.get("/memories", HTTP_ACCEPT=media_type)
    assert response.status_code == 200 and response["Content-Type"].startswith(media_type)
    assert {item["id"] for item in yaml.safe_load(response.content)["data"]} == public_ids(directory_world)
    document = yaml.safe_load(anon_client.get("/openapi.yaml").content)
    assert media_type in document["paths"]["/memories"]["get"]["responses"]["200"]["content"]


def test_accept_json_and_the_md_suffix(anon_client, directory_world):
    assert anon_client.get("/memories", HTTP_ACCEPT="application/json")["Content-Type"].startswith("application/json")
    response = anon_client.get("/memories.md", HTTP_ACCEPT="application/json")  # the suffix wins
    assert response["Content-Type"].startswith("text/markdown")


def test_unknown_suffix_is_404(anon_client):
    assert_error(anon_client.get("/memories.xml"), 404, "not_found_error")


def test_unacceptable_accept_header_is_406(anon_client):
    assert anon_client.get("/memories", HTTP_ACCEPT="image/png").status_code == 406


def test_directory_pages_with_a_next_link_in_every_format(anon_client, owner):
    for index in range(5):
        StoreFactory(owner=owner, canonical=False, name=f"Public {index}", visibility=Visibility.PUBLIC)
    first = anon_client.get("/memories.json", {"limit": 2})
    next_url = first.json()["meta"]["next_url"]
    assert next_url.startswith("http://testserver/memories.json?cursor=")
    assert first["Link"] == f'<{next_url}>; rel="next"'
    names = [item["name"] for item in first.json()["data"]]
    url = next_url
    for _ in range(10):  # bounded walk
        if not url:
            break
        page = anon_client.get(url.removeprefix("http://testserver"))
        names += [item["name"] for item in page.json()["data"]]
        url = page.json()["meta"]["next_url"]
    assert sorted(names) == [f"Public {index}" for index in range(5)]
    markdown = anon_client.get("/memories", {"limit": 2}).content.decode()
    assert "[Next page](http://testserver/memories?cursor=" in markdown


def test_last_page_has_no_next_link(anon_client, public_store):
    response = anon_client.get("/memories.json")
    assert response.json()["meta"] == {"next_cursor": None, "next_url": None}
    assert "Link" not in response


def test_markdown_escapes_names_and_quotes_descriptions(anon_client, owner):
    StoreFactory(
        owner=owner,
        canonical=False,
        name="[click](http://evil) <b> &copy;",
        description="# Heading\n<script>alert(1)</script>",
        visibility=Visibility.PUBLIC,
    )
    text = anon_client.get("/memories").content.decode()
    assert "\\[click\\]\\(http://evil\\) \\<b\\> \\&copy;" in text
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").render(text)  # the name as typed: no link, no tag, no entity (a breaker: ©)
    assert "<h2>[click](http://evil) &lt;b&gt; &amp;copy;</h2>" in html
    assert "> # Heading\n> <script>alert(1)</script>\n" in text  # the raw text, unchanged, inside a fence


@pytest.mark.parametrize(
    "description",
    [
        "# Official: log in\n[Sign in here](http://evil.example/login) ![x](http://evil.example/track.png)",
        "```\n# out of the fence?\n```\n<img src=http://evil.example/t.png>",
        "````\n[a](http://evil.example)\n````` and ~~~\n<script>alert(1)</script>\n&lt;b&gt; &amp; <b>bold</b>",
        "  indented\n\n\n> nested quote\n- [link](javascript:alert(1))\n",
        "<http://evil.example/autolink> https://evil.example/bare [ref]\n\n[ref]: http://evil.example",
    ],
)
def test_a_description_renders_as_its_literal_text_in_commonmark(anon_client, owner, description):
    """A breaker's description rendered a heading, a live link and a remote image (a tracking pixel) in the
    directory: rendered by a CommonMark renderer, a description is now only its own text, in a code block."""
    from markdown_it import MarkdownIt

    StoreFactory(owner=owner, canonical=False, name="Notes", description=description, visibility=Visibility.PUBLIC)
    html = MarkdownIt("commonmark").render(anon_client.get("/memories").content.decode())

    quoted = html[html.index("<blockquote>") : html.index("</blockquote>")]
    assert re.fullmatch(r"<blockquote>\n<pre><code class=\"language-text\">[^<]*</code></pre>\n", quoted), quoted
    shown = unescape(quoted.split('<code class="language-text">')[1].split("</code>")[0])
    assert shown == description.rstrip("\n") + "\n"


def test_the_directory_ignores_who_is_asking(make_client, owner, staff, directory_world):
    for client in (make_client(owner), make_client(staff)):
        data = client.get("/memories.json").json()["data"]
        assert {item["id"] for item in data} == public_ids(directory_world)


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"cursor": "nope"}, {"scope": "team"}, {"q": "x"}])
def test_bad_directory_queries_are_400(anon_client, params):
    assert_error(anon_client.get("/memories", params), 400, "invalid_request_error")


@pytest.mark.parametrize(("fmt", "media_type"), [("json", "application/json"), ("yaml", "application/yaml")])
def test_the_documented_format_parameter_picks_the_representation(anon_client, directory_world, fmt, media_type):
    # issue 15 #3: `format` is documented on GET /memories, so it must not be an unknown parameter.
    response = anon_client.get("/memories", {"format": fmt})
    assert response.status_code == 200
    assert response["Content-Type"].startswith(media_type)
    unknown = anon_client.get("/memories", {"format": "xml"})  # a bad value of a documented parameter: 400
    assert_error(unknown, 400, "invalid_request_error")
    assert "format" in unknown.json()["error"]["details"]["fields"]
    assert anon_client.get("/memories.xml").status_code == 404  # no such URL


def test_scope_filter(anon_client, directory_world):
    data = anon_client.get("/memories.json", {"scope": "board"}).json()["data"]
    assert [item["id"] for item in data] == [str(directory_world["public_board"].pk)]


@pytest.mark.parametrize("count", [5, 200])
def test_directory_runs_a_constant_number_of_queries(anon_client, owner, count, django_assert_max_num_queries):
    for index in range(count):
        StoreFactory(owner=owner, canonical=False, name=f"P{index}", visibility=Visibility.PUBLIC)
        StoreFactory(owner=owner, canonical=False, name=f"Q{index}")
    with django_assert_max_num_queries(1):
        response = anon_client.get("/memories.json", {"limit": 100})
    assert len(response.json()["data"]) == min(count, 100)
