"""`dflash-bot try DRAFT_REPO`: measure a published pair on this machine, beside the figures its card states.

A card's speed-ups come from the validation machine; whether the draft pays off on a user's laptop, iGPU or NPU,
and at which `num_assistant_tokens`, only a run there says. This reads the draft repo's record
(`openvino_export.json`), pins the draft at the asked revision and the target repo at the newest commit that holds
the very files the draft was validated with (the record lists every file's sha256; the record names no target
commit, and a later card-only commit to the target changes none of them), downloads both (each file checked against
the Hub's hash by `Hub.download`, then against the record), and runs the build's own validation
(`bot.builder.validate`: the lossless check under exact properties, then the k sweep) on the chosen device. It only
reads from the Hub, and needs the base install only (no export toolchain).

Where GenAI runs: on CPU in the sandbox child the build uses (`validate_pair`: no token in reach, a time limit, the OS
confinement), so a hostile IR meets the same walls as in a build; on an accelerator (GPU, NPU, AUTO, ...) in this
process (`run_validation`), because the child's Landlock rules grant no device nodes (`/dev/dri`, `/dev/accel`) nor
the GPU driver's files, and the child would not see the device. The files it loads were checked against the record
first either way.

A mirror's answers are untrusted, as a checkpoint is (docs/design.md §11): a commit id must be 40 hex digits before it
is joined to a path, every file name of the record must be a top-level name `try` downloads (`is_try_file`: the
builder's allow-list and the IR files the bundle publishes) before anything is downloaded, the download goes only into
the cache folder, and the target's commit history is read from a few pages, each commit once, under a deadline
(`target_commit_of`).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from bot.builder.bundle import DRAFT_FILES, TARGET_FILES
from bot.builder.validate import run_validation, validate_pair
from bot.core.errors import BotError, Failure, Stage, UsageError
from bot.core.hashes import FileHash, HubHash, LocalHash, hash_file, mismatch
from bot.core.naming import validate_repo_id
from bot.core.recipe import ValidationSettings, load_recipe
from bot.core.record import PROVENANCE_FILE, BuildRecord, FileDigest, FileList, RecordError, parse_draft_record
from bot.core.record_checks import Validation
from bot.core.record_files import differs_from_record
from bot.core.safe_text import clean
from bot.core.settings import SANDBOX_LAYERS
from bot.core.speedup import compare_to_card
from bot.discover.fetch import is_allowed
from bot.hub.client import Hub

MAX_TARGET_COMMITS = 50  # how far back the target repo's history is searched for the files the draft was validated with
# The history's pages read for it: the Hub lists 50 commits a page, so one is the rule; a mirror that pages one commit
# at a time gets its first few searched, never a request per commit.
MAX_COMMIT_PAGES = 3
# The whole search (head, history, each commit's file list) ends here, or at the Hub settings' plan deadline if that is
# sooner: a mirror that answers every request just inside its timeouts still cannot keep `try` busy.
SEARCH_DEADLINE_S = 300.0
COMMIT_ID = re.compile(r"[0-9a-f]{40}")
# Devices OpenVINO does not list in `available_devices` but accepts: they pick or combine the real ones.
VIRTUAL_DEVICES = ("AUTO", "MULTI", "HETERO")
DEFAULT_CACHE = Path.home() / ".cache" / "dflash-bot" / "try"
COLUMNS = ("k", "accept length", "tokens/s", "plain tokens/s", "speed-up", "card: accept length", "card: speed-up")


@dataclass(frozen=True)
class TryOptions:
    """What the user asked for (`dflash-bot try`'s options, one field each)."""

    draft_repo: str
    revision: str | None = None
    device: str = "CPU"
    prompts: tuple[str, ...] = ()
    max_new_tokens: int | None = None
    cache: Path = DEFAULT_CACHE


@dataclass(frozen=True)
class PinnedPair:
    """A published draft at one commit, its record, and the target repo at the commit holding the files the draft
    was validated with."""

    draft_repo: str
    draft_commit: str
    target_repo: str
    target_commit: str
    record: BuildRecord


@dataclass(frozen=True)
class TryResult:
    """What this machine measured for a pinned pair, with the card's figures (the record) beside it."""

    pair: PinnedPair
    measured: Validation
    genai: str  # the openvino-genai version that ran it
    hardware: str  # the device's full name (for AUTO: the devices it picks from)

    @property
    def exit_code(self) -> int:
        """0 when lossless on this device, 1 when not (what the command exits with)."""
        return 0 if self.measured.lossless else 1

    def as_dict(self) -> dict[str, Any]:
        """The result for machines (`--json`): this machine's figures, and the card's under `card`."""
        card = self.pair.record.validation
        measured = self.measured.model_dump(mode="json")
        return {
            "draft": {"repo": self.pair.draft_repo, "commit": self.pair.draft_commit},
            "target": {"repo": self.pair.target_repo, "commit": self.pair.target_commit},
            "device": self.measured.device,
            "hardware": clean(self.hardware),
            "cores": self.measured.cores,
            "openvino_genai": self.genai,
            "lossless": self.measured.lossless,
            "mismatches": measured["mismatches"],
            "runs": measured["runs"],
            "recommended_num_assistant_tokens": self.measured.recommended_num_assistant_tokens,
            "speedup_note": self.measured.speedup_note,
            "card": {
                "device": clean(card.device),
                "hardware": clean(card.hardware),
                "cores": card.cores,
                "openvino_genai": clean(self.pair.record.toolchain.openvino_genai),
                "runs": [run.model_dump(mode="json") for run in card.runs],
                "recommended_num_assistant_tokens": card.recommended_num_assistant_tokens,
            },
        }


def try_pair(
    hub: Hub, options: TryOptions, *, layers: Sequence[str] = SANDBOX_LAYERS, console: Console | None = None
) -> TryResult:
    """Pin, download and measure one published pair on this machine (the `dflash-bot try` command).

    Args:
        hub: a reading client (no write call is made).
        layers: the OS confinement layers the CPU validation child may use (`Settings.sandbox_layers`).
        console: where progress goes (default: stderr, so that stdout carries only the result).

    Returns:
        The measurement; `exit_code` is 1 when the pair is not lossless on this device.

    Raises:
        UsageError: an unknown device, or prompts and lengths the validation refuses (before any Hub call).
        Skip: the draft repo, revision or the record's target repo is not there (or not visible with this token).
        Failure: no usable record, no target commit holding the recorded files, a file that is not the recorded
            one, or GenAI could not run the pair.
    """
    try:
        validate_repo_id(options.draft_repo, what="DRAFT_REPO")
    except BotError as error:
        raise UsageError(error.message) from None
    device = check_device(options.device)
    settings = validation_settings(device, options.prompts, options.max_new_tokens)
    pair = pin_pair(hub, options.draft_repo, options.revision)
    files = pair.record.files
    assert files is not None  # pin_pair refuses a record without them
    console = console or Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as downloads:
        draft_dir = fetch_files(hub, pair.draft_repo, pair.draft_commit, files.draft, options.cache, downloads)
        target_dir = fetch_files(hub, pair.target_repo, pair.target_commit, files.target, options.cache, downloads)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as runs:
        running = runs.add_task(f"lossless check and k sweep on {device}", total=1)
        record = pair.record
        # The build sized GenAI's linear-attention state pool only for a target with such layers: so does this run.
        linear = record.validation.num_linear_attention_blocks is not None
        measured = measure(
            draft_dir, target_dir, settings, is_vlm=record.target.is_vlm, linear_attention=linear, layers=layers
        )
        runs.update(running, completed=1)
    return TryResult(pair, measured, genai=_version("openvino-genai"), hardware=full_device_name(device))


def check_device(device: str) -> str:
    """The device name as OpenVINO spells it, when OpenVINO sees that device here.

    Raises:
        UsageError: OpenVINO does not see it; the message lists the devices it does see.
    """
    import openvino as ov  # a second to import: only the commands that run a model pay for it

    available = [str(name) for name in ov.Core().available_devices]
    wanted = device.strip().upper()
    families = {name.split(".")[0] for name in available}
    if wanted in available or wanted in families or wanted.split(":")[0] in VIRTUAL_DEVICES:
        return wanted
    raise UsageError(
        f"--device {clean(device)!r}: OpenVINO does not see such a device on this machine; it sees "
        f"{', '.join(available) or 'none'} (and AUTO, which picks one of them)"
    )


def full_device_name(device: str) -> str:
    """`FULL_DEVICE_NAME` of a device; for AUTO and the like (whose own is just "AUTO"), those of the devices it
    picks from."""
    import openvino as ov  # as in check_device

    core = ov.Core()
    if device.split(":")[0] not in VIRTUAL_DEVICES:
        return str(core.get_property(device, "FULL_DEVICE_NAME"))
    names = [f"{name}: {core.get_property(name, 'FULL_DEVICE_NAME')}" for name in core.available_devices]
    return f"{device.split(':')[0]} over " + "; ".join(names)


def validation_settings(device: str, prompts: Sequence[str], max_new_tokens: int | None) -> ValidationSettings:
    """The default recipe's validation settings on `device`, with the user's prompts and length when given.

    Raises:
        UsageError: the validation refuses them (fewer than its minimum of prompts, a length out of range).
    """
    data = load_recipe().validation.model_dump()
    data["device"] = device
    if prompts:
        data["prompts"] = list(prompts)
    if max_new_tokens is not None:
        data["max_new_tokens"] = max_new_tokens
    try:
        return ValidationSettings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = {"prompts": "--prompt", "max_new_tokens": "--max-new-tokens"}.get(str(first["loc"][0]), "")
        raise UsageError(f"{option}: {first['msg']}".strip(": ")) from None


def pin_pair(hub: Hub, draft_repo: str, revision: str | None) -> PinnedPair:
    """Read the draft's record at `revision`, and find the target commit that holds the files it lists.

    Raises:
        Skip: the repo or revision is not there (or not visible with this token).
        Failure: no record there, one this bot cannot read, one whose build failed its gates or that lists no files,
            or no target commit holds the recorded files.
    """
    commit = checked_commit(hub.repo_files(draft_repo, revision).sha, draft_repo)
    if revision is not None and COMMIT_ID.fullmatch(revision) and commit != revision:
        raise Failure(
            f"asked for commit {revision[:7]}, the Hub answered {commit[:7]}: refused",
            subject=draft_repo,
            stage=Stage.VERIFY,
        )
    record = read_record(hub, draft_repo, commit)
    assert record.repos is not None and record.files is not None  # read_record refuses a record without them
    target_repo = validate_repo_id(record.repos.target, what=f"the target repo named by {draft_repo}'s record")
    target_commit = target_commit_of(hub, target_repo, record.files.target)
    return PinnedPair(draft_repo, commit, target_repo, target_commit, record)


def read_record(hub: Hub, repo: str, commit: str) -> BuildRecord:
    """The draft record at one commit, its bytes checked against the Hub's hash like every other file.

    Raises:
        Failure: the record is missing, not the file the Hub lists, not one this bot reads, from a build that failed
            its gates, or without the file list and repo names a published build carries.
    """
    data = hub.read_file(repo, PROVENANCE_FILE, revision=commit)
    if data is None:
        raise Failure(
            f"no {PROVENANCE_FILE} at {commit[:7]}: not a draft repo published by dflash-bot",
            subject=repo,
            stage=Stage.VERIFY,
        )
    listed = hub.listed_hashes(repo, commit).get(PROVENANCE_FILE)
    problem = (
        "the Hub lists no hash for it" if listed is None or not listed.checkable else mismatch(_hashed(data), listed)
    )
    if problem:
        raise Failure(f"{PROVENANCE_FILE} at {commit[:7]}: {problem}", subject=repo, stage=Stage.VERIFY)
    try:
        record = parse_draft_record(data)
    except RecordError as exc:
        raise Failure(f"its record is not one this bot reads: {exc}", subject=repo, stage=Stage.VERIFY) from None
    if not record.passed:
        raise Failure(f"its record says the build failed: {'; '.join(record.failed_gates)}", subject=repo)
    if record.files is None or record.repos is None:
        raise Failure(
            f"its record lists no file hashes (schema {record.schema_version}, an older bot): nothing to check a "
            "download against",
            subject=repo,
            stage=Stage.VERIFY,
        )
    refused = sorted({*refused_names(record.files.draft), *refused_names(record.files.target)})
    if refused:
        raise Failure(
            f"its record lists files `try` never downloads (not a top-level file of the allowed kinds: configs, "
            f"tokenizer files, the chat template, IR .xml/.bin pairs): {', '.join(clean(repr(n)) for n in refused)}",
            subject=repo,
            stage=Stage.VERIFY,
        )
    return record


def checked_commit(commit: str, repo: str) -> str:
    """A commit id the Hub (or a mirror) answered, once it is one: 40 hex digits, nothing a path could hold.

    Raises:
        Failure: anything else (an absolute path, `..`, a branch name), before it is joined to a path.
    """
    if not COMMIT_ID.fullmatch(commit):
        raise Failure(
            f"the Hub answered {clean(repr(commit[:100]))} as a commit id, not 40 hex digits: refused before "
            "anything is written",
            subject=repo,
            stage=Stage.VERIFY,
        )
    return commit


def is_try_file(name: str) -> bool:
    """Whether `try` may download a file of this name: a top-level name the builder may read from a checkpoint
    (`bot.discover.fetch.is_allowed`: configs, tokenizer files, chat templates) or one of the IR files the bundle
    publishes by name; never code, a pickle, a hidden file or a path."""
    return is_allowed(name) or name in {*DRAFT_FILES, *TARGET_FILES}


def refused_names(files: FileList) -> list[str]:
    """The names of a file list that `try` refuses (`is_try_file`)."""
    return sorted(name for name in files if not is_try_file(name))


def target_commit_of(hub: Hub, repo: str, files: FileList) -> str:
    """The newest commit of the target repo whose files are the recorded ones (its head, unless the target was
    exported again since; then its history is searched, `MAX_TARGET_COMMITS` deep, from at most `MAX_COMMIT_PAGES`
    pages), within `SEARCH_DEADLINE_S` (or the plan deadline of the Hub's settings, if sooner).

    Raises:
        Failure: no commit searched holds them (naming how the head differs).
        HubError: the Hub kept failing, or the search ran past its deadline (naming it).
    """
    with hub.deadline(Stage.COMMITS, min(SEARCH_DEADLINE_S, hub.settings.plan_deadline_s)):
        head = checked_commit(hub.repo_files(repo).sha, repo)
        why_not = _differs(hub.listed_hashes(repo, head), files)
        if why_not is None:
            return head
        history = hub.commit_ids(repo, limit=MAX_TARGET_COMMITS, pages=MAX_COMMIT_PAGES)  # each id once
        for commit in history[1:]:
            if _differs(hub.listed_hashes(repo, checked_commit(commit, repo)), files) is None:
                return commit
    raise Failure(
        f"no commit of the target repo holds the files this draft was validated with (at its head {head[:7]}: "
        f"{why_not}; {max(len(history), 1)} commits searched, from at most {MAX_COMMIT_PAGES} pages of its history)",
        subject=repo,
        stage=Stage.VERIFY,
    )


def fetch_files(hub: Hub, repo: str, commit: str, files: FileList, cache: Path, progress: Progress) -> Path:
    """Every recorded file of one repo commit in a cache folder of its own: a file an earlier run left there is
    kept when its bytes are still the recorded ones, every other is downloaded (checked against the Hub's hash),
    and each downloaded file is checked against the record.

    Returns:
        The folder (`cache/<namespace>--<name>/<commit>`).

    Raises:
        Failure: a name `try` does not download, a commit that is not a commit id, a folder outside `cache`, or a
            downloaded file that is not the one the record lists (or what `Hub.download` raises).
    """
    refused = refused_names(files)
    if refused:
        raise Failure(f"not files `try` downloads: {', '.join(map(repr, refused))}", subject=repo, stage=Stage.VERIFY)
    dest = cache / validate_repo_id(repo, what="a repo to download").replace("/", "--") / checked_commit(commit, repo)
    if not dest.resolve().is_relative_to(cache.resolve()):
        raise Failure(f"{dest} is outside the cache folder {cache}: refused", subject=repo, stage=Stage.VERIFY)
    missing = [name for name, digest in sorted(files.items()) if not _is_recorded(dest / name, digest)]
    label = f"{repo}@{commit[:7]}"
    if not missing:
        size = sum(digest.size for digest in files.values())
        progress.add_task(f"{label} (from the cache, checked)", total=size, completed=size)
        return dest
    with _watched(progress, label, dest, missing, total=sum(files[name].size for name in missing)):
        downloaded = hub.download(repo, commit, dest, missing)
    for name in missing:
        problem = _against_record(downloaded.files[name], files[name])
        if problem:
            (dest / name).unlink(missing_ok=True)
            raise Failure(f"{name} at {commit[:7]}: {problem}", subject=repo, stage=Stage.VERIFY)
    return dest


def measure(
    draft_dir: Path,
    target_dir: Path,
    settings: ValidationSettings,
    *,
    is_vlm: bool,
    linear_attention: bool,
    layers: Sequence[str],
) -> Validation:
    """The build's validation of the pair on `settings.device`: in the sandbox child on CPU, here otherwise.

    Raises:
        Failure: GenAI could not load or run the pair on the device (or the child's time limit passed).
    """
    if settings.device == "CPU":
        with tempfile.TemporaryDirectory(prefix="dflash-bot-try-") as work:
            return validate_pair(
                target_dir,
                draft_dir,
                settings,
                work=Path(work),
                is_vlm=is_vlm,
                linear_attention=linear_attention,
                layers=layers,
            )
    try:
        return run_validation(target_dir, draft_dir, settings, vlm=is_vlm, linear_attention=linear_attention)
    except BotError:
        raise
    except Exception as exc:  # GenAI's RuntimeError: the device cannot run this pair (or with these properties)
        message = clean(" ".join(str(exc).split()))[:400]
        raise Failure(f"GenAI could not run the pair on {settings.device}: {message}", stage=Stage.VALIDATE) from None


def render(result: TryResult, console: Console) -> None:
    """The table (this machine beside the card, per k), the devices and versions, the recommendation and the
    lossless verdict (with the first diverging position when there is one)."""
    measured, card = result.measured, result.pair.record.validation
    card_runs = {run.num_assistant_tokens: run for run in card.runs}
    pair = result.pair
    table = Table(title=f"{pair.draft_repo}@{pair.draft_commit[:7]} with {pair.target_repo}@{pair.target_commit[:7]}")
    for header in COLUMNS:
        table.add_column(header, justify="right")
    for run in measured.runs:
        on_card = card_runs.get(run.num_assistant_tokens)
        table.add_row(
            str(run.num_assistant_tokens),
            f"{run.accept_length:.2f}",
            f"{run.tokens_per_s:.1f}",
            f"{run.baseline_tokens_per_s:.1f}",
            f"x{run.speedup:.2f}",
            f"{on_card.accept_length:.2f}" if on_card else "-",
            f"x{on_card.speedup:.2f}" if on_card else "-",
        )
    console.print(table)
    for line in _summary(result):
        console.print(Text(line))  # Text: no markup is read from names the record holds


def _summary(result: TryResult) -> list[str]:
    measured, card = result.measured, result.pair.record.validation
    best = measured.best_run
    here = measured.speedup_note or f"x{best.speedup:.2f}, accept length {best.accept_length:.2f}"
    lines = [
        f"this machine: {_machine(measured.device, result.hardware, measured.cores)}; OpenVINO GenAI {result.genai}",
        f"the card's:   {_machine(card.device, card.hardware, card.cores)}; OpenVINO GenAI "
        f"{clean(result.pair.record.toolchain.openvino_genai)}",
        f"recommended num_assistant_tokens here: {measured.recommended_num_assistant_tokens} ({here}); the card "
        f"recommends {card.recommended_num_assistant_tokens} (x{card.best_run.speedup:.2f})",
        compare_to_card(measured.runs, card.best_run),
    ]
    if measured.lossless:
        runs = len(measured.runs) * (len(measured.prompts) + measured.image_prompts)
        lines.append(f"lossless on {measured.device}: speculative output equals plain greedy in all {runs} runs")
    else:
        first = measured.mismatches[0]
        lines.append(
            f"NOT lossless on {measured.device}: prompt {first.prompt_index} with num_assistant_tokens="
            f"{first.num_assistant_tokens} first differs from plain greedy at token {first.first_difference} "
            f"({len(measured.mismatches)} prompt/k run(s) differ)"
        )
    return lines


def to_json(result: TryResult) -> str:
    return json.dumps(result.as_dict(), indent=2)


def stdout_console() -> Console:
    """The console the result goes to: wide enough for the table's seven columns when stdout is a pipe or a file
    (rich would wrap them at 80)."""
    return Console(width=None if sys.stdout.isatty() else 120)


def _machine(device: str, hardware: str, cores: int | None) -> str:
    return f"{clean(device)} ({clean(hardware)}" + (f", {cores} logical cores)" if cores else ")")


def _differs(listed: dict[str, HubHash], files: FileList) -> str | None:
    """How a commit's files differ from the recorded ones (None: it holds them all); other files do not count."""
    return differs_from_record(listed, files, rendered=tuple(sorted(set(listed) - set(files))))


def _is_recorded(path: Path, digest: FileDigest) -> bool:
    """Whether a cached file is still the recorded one (its size first, then its sha256)."""
    if not path.is_file() or path.stat().st_size != digest.size:
        return False
    return _against_record(hash_file(path).file, digest) is None


def _against_record(got: FileHash, digest: FileDigest) -> str | None:
    if (got.sha256, got.size) == (digest.sha256, digest.size):
        return None
    return (
        f"sha256 {got.sha256} ({got.size} bytes) downloaded, as the Hub lists it, but the record lists sha256 "
        f"{digest.sha256} ({digest.size} bytes)"
    )


def _hashed(data: bytes) -> LocalHash:
    """`hash_file`'s two hashes of bytes held in memory."""
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return LocalHash(FileHash(hashlib.sha256(data).hexdigest(), len(data)), blob)


@contextmanager
def _watched(progress: Progress, label: str, dest: Path, names: list[str], *, total: int) -> Iterator[None]:
    """A progress bar of the bytes on disk while `Hub.download` fetches `names`: it writes each file into
    `.<dest>.partial/` and moves it into `dest` once its hash matched."""
    task = progress.add_task(label, total=total)
    partials = dest.parent / f".{dest.name}.partial"
    stop = threading.Event()

    def received() -> int:
        return sum(_size(dest / name) or _size(partials / name) for name in names)

    def poll() -> None:
        while not stop.wait(0.2):
            progress.update(task, completed=received())

    watcher = threading.Thread(target=poll, name="try-download-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        progress.update(task, completed=received())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"
