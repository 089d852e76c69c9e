"""Read a source repo's model card the way the Hub does, and keep only values that are what they claim to be.

A source card is untrusted text. Its metadata block is found with `huggingface_hub`'s own pattern (the same one the
Hub server uses, so a `--- ` opener with a trailing space or a `# ------` comment means here what it means there)
and parsed by `huggingface_hub.ModelCard`, after a byte limit and with YAML anchors and aliases refused (an alias
bomb of a few hundred bytes expands into megabytes once serialised). The values the bot copies onto its own cards
are then validated: a license id from the Hub's list, a `license_link` that is an https URL on the source repo or
on a well-known license host, `base_model` entries that are valid repo ids. Anything else is dropped and the
record's `notes` say what and why. Text that reaches a card body goes through `escape_markdown_html`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from huggingface_hub import ModelCard
from huggingface_hub.repocard import REGEX_YAML_BLOCK
from huggingface_hub.utils import HFValidationError, validate_repo_id

from bot.core.safe_text import clean

MAX_README_BYTES = 1024 * 1024  # a card body is read for the target's name only; real cards are tens of KB
MAX_METADATA_BYTES = 64 * 1024  # real front matter is a few hundred bytes to a few KB
MAX_YAML_EVENTS = 20_000  # bounds the parse work of a block that passed the byte limit
MAX_LINK_CHARS = 512

# The Hub's license identifiers, from https://huggingface.co/docs/hub/repositories-licenses (hub-docs,
# docs/hub/repositories-licenses.md, the "licenses" region). huggingface_hub does not ship the list.
HUB_LICENSES = frozenset(
    [
        "apache-2.0",
        "mit",
        "openrail",
        "bigscience-openrail-m",
        "creativeml-openrail-m",
        "bigscience-bloom-rail-1.0",
        "bigcode-openrail-m",
        "afl-3.0",
        "artistic-2.0",
        "bsl-1.0",
        "bsd",
        "bsd-2-clause",
        "bsd-3-clause",
        "bsd-3-clause-clear",
        "c-uda",
        "cc",
        "cc0-1.0",
        "cc-by-2.0",
        "cc-by-2.5",
        "cc-by-3.0",
        "cc-by-4.0",
        "cc-by-sa-3.0",
        "cc-by-sa-4.0",
        "cc-by-nc-2.0",
        "cc-by-nc-3.0",
        "cc-by-nc-4.0",
        "cc-by-nd-4.0",
        "cc-by-nc-nd-3.0",
        "cc-by-nc-nd-4.0",
        "cc-by-nc-sa-2.0",
        "cc-by-nc-sa-3.0",
        "cc-by-nc-sa-4.0",
        "cdla-sharing-1.0",
        "cdla-permissive-1.0",
        "cdla-permissive-2.0",
        "wtfpl",
        "ecl-2.0",
        "epl-1.0",
        "epl-2.0",
        "etalab-2.0",
        "eupl-1.1",
        "eupl-1.2",
        "agpl-3.0",
        "gfdl",
        "gpl",
        "gpl-2.0",
        "gpl-3.0",
        "lgpl",
        "lgpl-2.1",
        "lgpl-3.0",
        "isc",
        "h-research",
        "intel-research",
        "lppl-1.3c",
        "ms-pl",
        "apple-ascl",
        "apple-amlr",
        "mpl-2.0",
        "odc-by",
        "odbl",
        "openrail++",
        "osl-3.0",
        "postgresql",
        "ofl-1.1",
        "ncsa",
        "unlicense",
        "zlib",
        "pddl",
        "lgpl-lr",
        "deepfloyd-if-license",
        "fair-noncommercial-research-license",
        "llama2",
        "llama3",
        "llama3.1",
        "llama3.2",
        "llama3.3",
        "llama4",
        "gemma",
        "unknown",
        "other",
    ]
)
# Hosts whose pages are license texts; any other host in a license_link is dropped.
LICENSE_HOSTS = frozenset(
    {
        "www.apache.org",
        "apache.org",
        "opensource.org",
        "choosealicense.com",
        "creativecommons.org",
        "www.gnu.org",
        "gnu.org",
        "spdx.org",
        "www.mozilla.org",
        "ai.google.dev",
        "www.llama.com",
        "llama.meta.com",
    }
)
HUB_HOST = "huggingface.co"
_LICENSE_NAME = re.compile(r"^[a-z0-9][a-z0-9.+-]{0,63}$")
# URL characters that cannot end a Markdown link, open HTML or break YAML quoting: no spaces, quotes, <>, (), [].
_SAFE_URL = re.compile(r"^[A-Za-z0-9._~:/?#@!$&*+,;=%-]+$")
_SAFE_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class CardRefused(ValueError):
    """A metadata block the bot will not parse (too large, anchors or aliases, too complex)."""


@dataclass(frozen=True)
class SourceCard:
    """What the bot takes from a source's model card, validated.

    `license`, `license_name` and `license_link` are safe to copy into our card's metadata and Legal section;
    `base_models` are valid repo ids; `text` is the raw card body (used to find a target's name, never rendered
    without `escape_markdown_html`); `notes` name every value that was dropped and why.
    """

    license: str | None
    license_name: str | None
    license_link: str | None
    base_models: tuple[str, ...]
    text: str
    notes: tuple[str, ...]
    metadata_from: str  # "hub" (the API's cardData), "readme" (parsed here) or "none"

    def provenance(self) -> dict:
        """The keys the build copies into `openvino_export.json` (`source`/`target`), as `card_license` did."""
        return {"license": self.license, "license_link": self.license_link}


def front_matter(text: str) -> tuple[str | None, str]:
    """The metadata block and the body of a card, by the Hub's own rule (huggingface_hub's REGEX_YAML_BLOCK)."""
    match = REGEX_YAML_BLOCK.search(text)
    if match is None:
        return None, text
    return match.group(2), text[match.end() :]


def refuse_unsafe_yaml(block: str) -> None:
    """Refuse a metadata block before it is parsed: over the byte limit, with anchors/aliases, or too complex.

    Raises:
        CardRefused: with the reason.
    """
    size = len(block.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise CardRefused(f"metadata block is {size} bytes, over the {MAX_METADATA_BYTES}-byte limit")
    try:
        for count, event in enumerate(yaml.parse(block, Loader=yaml.SafeLoader)):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise CardRefused(
                    "metadata block uses YAML anchors or aliases (refused: they can expand a few "
                    "hundred bytes into megabytes)"
                )
            if count > MAX_YAML_EVENTS:
                raise CardRefused(f"metadata block has over {MAX_YAML_EVENTS} YAML nodes")
    except yaml.YAMLError as exc:
        raise CardRefused(f"metadata block is not valid YAML ({_first_line(exc)})") from None


def parse_readme_metadata(text: str) -> tuple[dict, str, list[str]]:
    """Metadata dict, body and notes of a README, parsed by `huggingface_hub.ModelCard` after the safety checks."""
    block, body = front_matter(text)
    if block is None:
        return {}, body, []
    try:
        refuse_unsafe_yaml(block)
        card = ModelCard(text, ignore_metadata_errors=True)
    except CardRefused as exc:
        return {}, body, [f"card metadata ignored: {exc}"]
    except (ValueError, yaml.YAMLError) as exc:
        return {}, body, [f"card metadata ignored: {_first_line(exc)}"]
    return card.data.to_dict(), card.text, []


def read_source_card(
    readme: bytes | str | None, *, repo_id: str | None, hub_card_data: Mapping | None = None
) -> SourceCard:
    """Parse and validate a source card.

    Args:
        readme: the README.md bytes (None: the repo has none).
        repo_id: the source repo (a `license_link` may point into it); None for a local folder.
        hub_card_data: the Hub's own `cardData` for this revision when the API gave it; it wins over our parse,
            so the bot reads the metadata the Hub shows.

    Returns:
        A SourceCard; never raises for bad card content (the dropped values are in `notes`).
    """
    notes: list[str] = []
    if isinstance(readme, bytes):
        if len(readme) > MAX_README_BYTES:
            notes.append(f"README.md is {len(readme)} bytes, over the {MAX_README_BYTES}-byte limit: ignored")
            readme = b""
        text = readme.decode("utf-8", "replace")
    else:
        text = readme or ""
        if len(text.encode("utf-8")) > MAX_README_BYTES:
            notes.append(f"README.md is over the {MAX_README_BYTES}-byte limit: ignored")
            text = ""
    metadata, body, parse_notes = parse_readme_metadata(text)
    notes += parse_notes
    origin = "readme" if metadata else "none"
    if hub_card_data:
        metadata, origin = dict(hub_card_data), "hub"
    license_id = _license(metadata.get("license"), notes)
    license_name = _license_name(metadata.get("license_name"), license_id, notes)
    return SourceCard(
        license=license_id,
        license_name=license_name,
        license_link=_license_link(metadata.get("license_link"), repo_id, notes),
        base_models=_base_models(metadata.get("base_model"), notes),
        text=body,
        notes=tuple(notes),
        metadata_from=origin,
    )


def read_folder_card(folder: Path, *, repo_id: str | None = None) -> SourceCard:
    """The SourceCard of a checkpoint folder's README.md (size-capped read)."""
    path = folder / "README.md"
    if not path.is_file() or path.is_symlink():
        return read_source_card(None, repo_id=repo_id)
    with path.open("rb") as handle:
        data = handle.read(MAX_README_BYTES + 1)
    return read_source_card(data, repo_id=repo_id)


def card_license(folder: Path, *, repo_id: str | None = None) -> dict:
    """`license` and `license_link` of a checkpoint's card, validated (the provenance keys the cards read)."""
    return read_folder_card(folder, repo_id=repo_id).provenance()


def escape_markdown_html(text: str) -> str:
    """Text from a source, made inert in a Markdown card body: HTML escaped, Markdown syntax backslashed, one line.

    Newlines become spaces (a value never starts a heading, list or front-matter fence of its own); control, bidi
    and zero-width characters are removed (`bot.core.safe_text.clean`).
    """
    flat = " ".join(clean(text).split())
    escaped = html.escape(flat, quote=True)
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|~>])", r"\\\1", escaped)


def _license(value: object, notes: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value in HUB_LICENSES:
        return value
    notes.append(f"license {_shown(value)} dropped: not a license id from the Hub's list")
    return None


def _license_name(value: object, license_id: str | None, notes: list[str]) -> str | None:
    if value is None:
        return None
    if license_id == "other" and isinstance(value, str) and _LICENSE_NAME.match(value):
        return value
    notes.append(f"license_name {_shown(value)} dropped: kept only as a lowercase slug beside license: other")
    return None


def _license_link(value: object, repo_id: str | None, notes: list[str]) -> str | None:
    """An https URL on the source repo or a license host; a bare file name means a file in the source repo."""
    if value is None:
        return None
    if isinstance(value, str) and repo_id and _SAFE_FILE_NAME.match(value) and ".." not in value:
        return f"https://{HUB_HOST}/{repo_id}/blob/main/{value}"
    if isinstance(value, str) and len(value) <= MAX_LINK_CHARS and _SAFE_URL.match(value):
        parts = urlsplit(value)
        host = (parts.hostname or "").lower()
        plain = parts.scheme == "https" and parts.username is None and parts.password is None and parts.port is None
        segments = parts.path.split("/")
        if (
            plain
            and ".." not in segments
            and (
                host in LICENSE_HOSTS
                or (host == HUB_HOST and repo_id is not None and parts.path.startswith(f"/{repo_id}/"))
            )
        ):
            return value
    notes.append(f"license_link {_shown(value)} dropped: not an https URL on the source repo or a license host")
    return None


def _base_models(value: object, notes: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    kept = []
    for item in values:
        try:
            if not isinstance(item, str):
                raise HFValidationError("not a string")
            validate_repo_id(item)
            kept.append(item)
        except HFValidationError:
            notes.append(f"base_model {_shown(item)} dropped: not a valid repo id")
    return tuple(kept)


def _shown(value: object, limit: int = 60) -> str:
    """A dropped value as it may appear in a report: one line, truncated, markup characters replaced by `?`."""
    text = re.sub(r"[^A-Za-z0-9 ._:/'=-]", "?", repr(value))
    return text if len(text) <= limit else text[:limit] + "..."


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
