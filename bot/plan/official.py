"""Find an official int4 target: a repo the OpenVINO organisation (or whoever the recipe names) already publishes.

A user who runs the official `OpenVINO/<target>-int4-ov` wants a draft validated against *that* IR, and a second
copy of the target under the bot's namespace helps nobody. So for each target to build, the plan looks up the repos
`publish.official_targets` names (one request each, once per run) and pins the first one that holds an OpenVINO IR
with its tokenizer IRs and whose card or record names the draft's resolved target as its model (`OfficialRepo`,
`why_not_named`: a repo found by a name derived from the target's may be another model's). Whether it serves is
only known once its IR is read: the build downloads it (every file checked against the Hub's hash), applies the
target IR rules the drafts need and exports the target as usual when it does not serve (`bot.builder.official_target`).
The repo is untrusted input like any checkpoint: only top-level IR, config and tokenizer files are downloaded, never
code or pickles.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from bot.core import log
from bot.core.errors import BotError
from bot.core.hub_records import RepoFiles
from bot.core.recipe import PublishSettings
from bot.core.record import PROVENANCE_FILE
from bot.discover.candidates import MAX_SMALL_FILE_BYTES
from bot.discover.fetch import is_allowed

# OpenVINO IR files: a model's graph and its weights (raw tensors, not a pickle), at the repo's top level.
from bot.hub.client import Hub

IR_FILE = re.compile(r"openvino_[A-Za-z0-9_]+\.(xml|bin)")
# What GenAI loads from a target folder besides its model: the tokenizer pair it runs the prompts through.
TOKENIZER_IRS = (
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
)
_NOT_DOWNLOADED = ("README.md",)


class OfficialRepo(BaseModel):
    """An official target repo pinned to a commit, and exactly the files a build downloads from it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")
    files: tuple[str, ...]
    ir_bytes: int = Field(ge=0)

    @property
    def pinned(self) -> str:
        return f"{self.repo}@{self.revision}"

    @property
    def short(self) -> str:
        return f"{self.repo}@{self.revision[:7]}"


def find_official(
    reader: Hub, publish: PublishSettings, target: str, *, is_vlm: bool
) -> tuple[OfficialRepo | None, str | None]:
    """The first official repo of `publish.official_targets` that holds a target IR, and why none did.

    One request per repo named (its files at its head); a repo that does not exist (or is not visible to this
    token) costs that request and nothing else.

    Args:
        target: the draft's target (its source repo id, as discovery resolved it).
        is_vlm: a vision-language target (its language model IR is `openvino_language_model.xml`).

    Returns:
        (the repo pinned at its head, None), or (None, why the repos found do not serve; None when none exists).
    """
    reasons = []
    for repo in publish.official_target_repos(target):
        head = reader.files_or_none(repo)
        if head is None:
            continue
        official, why_not = pin_official(head, is_vlm=is_vlm)
        if official is not None:
            why_not = why_not_named(reader, head, target)
            official = official if why_not is None else None
        if official is not None:
            log.step("%s: official target %s found (%.2f GB)", target, official.short, official.ir_bytes / 1e9)
            return official, None
        log.step("%s: official target %s not used: %s", target, repo, why_not)
        reasons.append(f"{repo} {why_not}")
    return None, "; ".join(reasons) or None


def why_not_named(reader: Hub, head: RepoFiles, target: str) -> str | None:
    """Why an official repo is not an export of `target` by its own word (None: it is): its card's `base_model`
    (as the Hub reads the card) or, failing that, its `openvino_export.json` (a record of this bot's format) must
    name that very repo. A repo found by a name derived from the target's (`OpenVINO/{target_name}-int4-ov`) may
    be another model's export: a fine-tune `ft-org/Qwen3-X` shares its name and tokenizer with `Qwen/Qwen3-X`, and
    its config's dimensions, but not its weights. One more request only when the card does not name it and a
    record is there.
    """
    named = head.card_data.get("base_model") if isinstance(head.card_data, dict) else None
    models = [named] if isinstance(named, str) else []
    models += [m for m in named if isinstance(m, str)] if isinstance(named, list) else []
    if target.lower() in (m.lower() for m in models):
        return None
    if PROVENANCE_FILE in head.sizes:
        try:
            exported = reader.target_record(head.repo_id, revision=head.sha)
        except BotError as error:
            return f"its record could not be read ({error.message})"
        if exported is not None and (exported.target.repo or "").lower() == target.lower():
            return None
        if exported is not None:
            return f"its record names {exported.target.repo or 'no repo'} as its model, not {target}"
    if models:
        return f"its card names {', '.join(models[:3])} as its model (base_model), not {target}"
    return f"neither its card (base_model) nor a record names {target} as its model"


def pin_official(head: RepoFiles, *, is_vlm: bool) -> tuple[OfficialRepo | None, str | None]:
    """The files of an official repo a build downloads, when it holds a target IR; else why not.

    Only top-level files: IR pairs (`openvino_*.xml/.bin`), configs, tokenizer files and chat templates (the
    allow-list checkpoints get, `bot.discover.fetch.is_allowed`, less the card and any safetensors); a non-IR file
    over the small-file limit is refused, as for a checkpoint.
    """
    if head.gated or head.private:
        return None, "is gated or private"
    model = "openvino_language_model" if is_vlm else "openvino_model"
    files = sorted(
        name
        for name in head.sizes
        if "/" not in name
        and (IR_FILE.fullmatch(name) or (is_allowed(name) and not name.endswith(".safetensors")))
        and name not in _NOT_DOWNLOADED
    )
    missing = [name for name in (f"{model}.xml", f"{model}.bin", "config.json", *TOKENIZER_IRS) if name not in files]
    if missing:
        return None, f"holds no {', '.join(missing)}"
    oversized = [n for n in files if not IR_FILE.fullmatch(n) and head.sizes[n] > MAX_SMALL_FILE_BYTES]
    if oversized:
        return None, f"{oversized[0]} is over the {MAX_SMALL_FILE_BYTES}-byte limit for a non-IR file"
    ir_bytes = sum(head.sizes[name] for name in files)
    return OfficialRepo(repo=head.repo_id, revision=head.sha, files=tuple(files), ir_bytes=ir_bytes), None
