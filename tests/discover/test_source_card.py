"""Hostile source cards (issue 11): what the bot keeps from them, and that it reads the metadata the Hub shows."""

from __future__ import annotations

import time

import pytest

from bot.discover.candidates import resolve_target_name
from bot.discover.source_card import (
    CardRefused,
    escape_markdown_html,
    read_source_card,
    refuse_unsafe_yaml,
)
from hubserver.metadata import parse_front_matter
from tests.conftest import fast_recipe

REPO = "z-lab/Qwen3-8B-DFlash-b16"
INJECTED_LICENSE = (
    'license: "mit\\n\\n# Pwned <img src=x onerror=alert(1)> [click](https://evil.example)"\n'
    "license_link: javascript:alert(1)\n"
)
# 428 bytes of YAML that expand into millions of strings once serialised (the bomb).
ALIAS_BOMB = (
    '---\nlicense: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "license_link: [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n---\n# Card\n"
)
# Front matter the two parsers once disagreed on; `base_model` is what the Hub shows for each (None: no metadata).
TRICKY = {
    "trailing space after the opening fence": ("--- \nbase_model: evil/Target\n---\nbody\n", None),
    "comment of dashes": ("---\n# ------\nbase_model: Qwen/Qwen3-8B\n---\nbody\n", "Qwen/Qwen3-8B"),
    "dashes inside a value": ("---\nbase_model: Qwen/Qwen3-8B\ndescription: a --- b\n---\n", "Qwen/Qwen3-8B"),
    "a rule in the body": (
        "---\nbase_model: Qwen/Qwen3-4B\n---\ntext\n---\nbase_model: evil/X\n---\n",
        "Qwen/Qwen3-4B",
    ),
    "CRLF line ends": ("---\r\nbase_model: Qwen/Qwen3-1.7B\r\n---\r\nbody\r\n", "Qwen/Qwen3-1.7B"),
    "leading blank line": ("\n---\nbase_model: Qwen/Qwen3-8B\n---\n", "Qwen/Qwen3-8B"),
    "list of base models": ("---\nbase_model:\n- Qwen/Qwen3-8B\n- other/Model\n---\n", "Qwen/Qwen3-8B"),
}


def test_injected_license_and_javascript_link_are_dropped_with_notes():
    card = read_source_card(f"---\n{INJECTED_LICENSE}---\n# Card\n".encode(), repo_id=REPO)
    assert card.license is None and card.license_link is None
    assert len(card.notes) == 2 and all("dropped" in note for note in card.notes)
    assert not any(marker in note for note in card.notes for marker in ("<", ">", "\n", "javascript:alert(1)"))
    assert card.provenance() == {"license": None, "license_link": None}


def test_alias_bomb_is_refused_quickly_and_leaves_nothing():
    assert len(ALIAS_BOMB.encode()) < 500
    started = time.monotonic()
    card = read_source_card(ALIAS_BOMB.encode(), repo_id=REPO)
    assert time.monotonic() - started < 1
    assert card.license is None and card.license_link is None and card.base_models == ()
    assert any("anchors or aliases" in note for note in card.notes)
    with pytest.raises(CardRefused, match="anchors or aliases"):
        refuse_unsafe_yaml("a: &x 1\nb: *x\n")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("license: 2024-01-01", None),  # YAML makes it a date
        ("license: apache-2.0", "apache-2.0"),
        ("license: Apache 2.0", None),
        ("license: [mit, apache-2.0]", None),
        ("license: other\nlicense_name: qwen-research", "other"),
    ],
)
def test_license_must_be_an_id_from_the_hubs_list(text, expected):
    assert read_source_card(f"---\n{text}\n---\n", repo_id=REPO).license == expected


def test_license_name_is_kept_only_as_a_slug_beside_other():
    assert (
        read_source_card("---\nlicense: other\nlicense_name: qwen-research\n---\n", repo_id=REPO).license_name
        == "qwen-research"
    )
    assert read_source_card('---\nlicense: other\nlicense_name: "a <b>"\n---\n', repo_id=REPO).license_name is None
    assert read_source_card("---\nlicense: mit\nlicense_name: x\n---\n", repo_id=REPO).license_name is None


@pytest.mark.parametrize(
    "link, expected",
    [
        (f"https://huggingface.co/{REPO}/blob/main/LICENSE", f"https://huggingface.co/{REPO}/blob/main/LICENSE"),
        ("LICENSE", f"https://huggingface.co/{REPO}/blob/main/LICENSE"),
        ("https://www.apache.org/licenses/LICENSE-2.0", "https://www.apache.org/licenses/LICENSE-2.0"),
        ("https://huggingface.co/evil/repo/blob/main/LICENSE", None),  # another repo
        (f"http://huggingface.co/{REPO}/blob/main/LICENSE", None),  # not https
        ("https://evil.example/LICENSE", None),
        (f"https://huggingface.co/{REPO}/blob/main/LICENSE)<img src=x onerror=alert(1)>", None),
        ("https://user:pw@www.apache.org/licenses/", None),
        (f"https://huggingface.co/{REPO}/../../evil/x", None),
        ("../LICENSE", None),
    ],
)
def test_license_link_is_https_on_the_source_repo_or_a_license_host(link, expected):
    card = read_source_card(f'---\nlicense: mit\nlicense_link: "{link}"\n---\n', repo_id=REPO)
    assert card.license_link == expected
    assert (expected is None) == bool(card.notes)


def test_base_model_entries_must_be_valid_repo_ids():
    card = read_source_card("---\nbase_model:\n- Qwen/Qwen3-8B\n- ../../etc\n- a/b/c\n- 42\n---\n", repo_id=REPO)
    assert card.base_models == ("Qwen/Qwen3-8B",)
    assert len(card.notes) == 3


def test_oversized_readme_and_metadata_are_ignored_with_a_note():
    huge = b"---\nlicense: mit\n---\n" + b"x" * (2 * 1024 * 1024)
    card = read_source_card(huge, repo_id=REPO)
    assert card.license is None and card.text == "" and "over the" in card.notes[0]
    big_block = '---\nlicense: mit\npad: "' + "x" * (70 * 1024) + '"\n---\n'
    assert "over the" in read_source_card(big_block, repo_id=REPO).notes[0]


def test_escaped_text_cannot_open_html_markdown_or_a_new_line():
    hostile = "mit\n\n# Pwned <img src=x onerror=alert(1)> [click](javascript:alert(1)) `code` *b*"
    escaped = escape_markdown_html(hostile)
    assert "\n" not in escaped and "<" not in escaped and ">" not in escaped
    assert "](" not in escaped and "[click]" not in escaped and "`" not in escaped.replace("\\`", "")
    assert escaped.startswith("mit \\# Pwned &lt;img")


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_bot_and_hub_read_the_same_base_model(name):
    text, shown = TRICKY[name]
    hub_view = parse_front_matter(text)  # the local Hub's parser, which follows the Hub's rule
    hub_base = (hub_view or {}).get("base_model")
    hub_base = hub_base[0] if isinstance(hub_base, list) else hub_base
    assert hub_base == shown
    ours = read_source_card(text.encode(), repo_id=REPO)
    assert (ours.base_models[0] if ours.base_models else None) == shown


def test_a_dash_comment_resolves_the_target_the_hub_shows_not_the_repo_name():
    text, shown = TRICKY["comment of dashes"]
    recipe = fast_recipe()
    card = read_source_card(text.encode(), repo_id="z-lab/Qwen3-4B-DFlash-b16")
    assert resolve_target_name("z-lab/Qwen3-4B-DFlash-b16", card, recipe) == (shown, "card base_model")


def test_the_hubs_card_data_wins_over_our_own_parse():
    readme = b"---\nbase_model: Qwen/Qwen3-4B\nlicense: mit\n---\n"
    card = read_source_card(
        readme, repo_id=REPO, hub_card_data={"base_model": "Qwen/Qwen3-8B", "license": "apache-2.0"}
    )
    assert card.base_models == ("Qwen/Qwen3-8B",) and card.license == "apache-2.0" and card.metadata_from == "hub"
    hostile = read_source_card(readme, repo_id=REPO, hub_card_data={"license": "mit\n# x", "base_model": "../x"})
    assert hostile.license is None and hostile.base_models == () and len(hostile.notes) == 2


def test_our_metadata_round_trips_through_huggingface_hubs_parser():
    """What the card renderer writes from this record parses back to the same values (no injection)."""
    from huggingface_hub import ModelCard, ModelCardData

    card = read_source_card(f"---\n{INJECTED_LICENSE}base_model: Qwen/Qwen3-8B\n---\n".encode(), repo_id=REPO)
    good = read_source_card(b"---\nlicense: apache-2.0\nlicense_link: LICENSE\n---\n", repo_id=REPO)
    for source in (card, good):
        data = ModelCardData(
            base_model=REPO,
            base_model_relation="quantized",
            license=source.license,
            license_link=source.license_link,
            library_name="openvino",
        )
        parsed = ModelCard(f"---\n{data.to_yaml()}\n---\n\n# Card\n").data.to_dict()
        assert parsed == {key: value for key, value in data.to_dict().items() if value is not None}
    assert "onerror" not in ModelCardData(license=card.license, license_link=card.license_link).to_yaml()


def test_an_oversized_published_record_is_rebuilt_not_skipped_forever(tmp_path):
    from huggingface_hub import HfApi

    from bot.core.record import PROVENANCE_FILE
    from bot.hub.client import Hub
    from hubserver import LocalHub

    with LocalHub(tmp_path / "hub", user="maintainer", token="hf_write") as server:
        api = HfApi(endpoint=server.url, token="hf_write")
        api.create_repo("maintainer/stuck-int4-ov")
        (tmp_path / PROVENANCE_FILE).write_bytes(b'{"pad": "' + b"x" * (5 * 1024 * 1024) + b'"}')
        api.upload_file(
            path_or_fileobj=tmp_path / PROVENANCE_FILE, path_in_repo=PROVENANCE_FILE, repo_id="maintainer/stuck-int4-ov"
        )
        assert Hub(server.url, "hf_write").draft_record("maintainer/stuck-int4-ov") is None


def test_discovery_through_the_local_hub_resolves_the_base_model_the_hub_shows(tiny, tmp_path):
    """A draft named like another target, whose card hides `base_model` behind a `# ------` comment: discovery
    (real listing over HTTP, the listing's cardData) resolves the target the Hub shows, and the card's injected
    license is dropped with a note."""
    import shutil

    from bot.discover.candidates import resolve
    from bot.hub.client import Hub
    from bot.hub.transport import configure_client
    from hubserver import LocalHub

    pair = tiny("dflash")
    draft = tmp_path / "draft"
    shutil.copytree(pair.draft, draft)
    (draft / "README.md").write_text(f"---\n# ------\nbase_model: Qwen/Qwen3-Tiny\n{INJECTED_LICENSE}---\n# Draft\n")
    with LocalHub(tmp_path / "hub", user="maintainer", token="hf_write") as server:
        configure_client(server.url)  # the client settings a local endpoint needs
        for repo, folder in (("Qwen/Qwen3-Tiny", pair.target), ("z-lab/Qwen3-Other-DFlash-b16", draft)):
            # Seeded as a repo the Hub already holds: a commit of this card would be refused now (its license).
            server.seed_folder(repo, folder)
        hub = Hub(server.url)
        (listing,) = hub.list_models(author="z-lab", search=None, filter_tags=(), limit=10)
        assert listing.card_data.get("base_model") == "Qwen/Qwen3-Tiny"  # what the Hub shows
        candidate = resolve(hub, listing, fast_recipe())
    assert candidate.target_repo == "Qwen/Qwen3-Tiny"  # from the card's base_model, not the repo name
    assert len(candidate.card_notes) == 2
