"""Faults, hostile input, concurrency and the trust boundary, against the local Hub over real HTTP.

Every scenario records a row (what was tried, what the bot did, the state the hub was left in);
`tests/reliability/report.py` runs this module and turns the rows into RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.builder.bundle import Bundle, find_local_paths, local_path_markers
from bot.core.errors import BotError, Failure
from bot.core.fingerprints import Fingerprints
from bot.core.naming import draft_output_repo, target_output_repo
from bot.core.record import Repos, write
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.publish.publisher import publish_bundle
from bot.run import demo
from bot.run.pipeline import fetch_and_build, run
from bot.run.report import RunReport
from bot.run.run_side import plan_step
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_KIND, SEEDED_REPOS, fast_recipe
from tests.reliability.rows import record, run_command

CANARY = "hf_canary_0123456789abcdef"
BASE = fast_recipe(num_assistant_tokens=[3])


def recipe_for(namespace: str):
    return BASE.model_copy(update={"publish": BASE.publish.model_copy(update={"namespace": namespace})})


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The shared local Hub (conftest) with the demo's repos and a canary write token for the `rel-canary` org."""
    demo.seed(hub.url, TOKEN, tmp_path_factory.mktemp("seed"), SEEDED_REPOS)
    hub.add_token(CANARY, "canary-bot", write=True, orgs=["rel-canary"])
    return hub


@pytest.fixture(scope="module")
def bundle(hub, tmp_path_factory):
    """One real bundle of the demo draft, published again and again under fresh namespaces."""
    reader = Hub(hub.url, TOKEN)
    job = next(iter(plan_step(reader, BASE, RunOptions(only=demo.DRAFT_REPO), RunReport())[1]))
    work = tmp_path_factory.mktemp("rel-build")
    report = RunReport()
    (outcome,) = fetch_and_build(reader, BASE, [job], work, report, keep_work=True)
    assert not report.outcomes and outcome.ok, outcome.error
    return outcome.bundle.root


def repo_state(hub, repo: str) -> tuple[str, bool]:
    """Describe a published repo and say whether it is whole: every file, card and provenance agreeing."""
    api = Hub(hub.url, TOKEN).api
    if not api.repo_exists(repo):
        return "absent", True
    files = set(api.list_repo_files(repo)) - {".gitattributes"}
    head = api.model_info(repo).sha[:7]
    if not files:
        return f"empty (its creation commit {head})", True
    needed = {"README.md", "openvino_export.json", "openvino_model.xml", "openvino_model.bin"}
    provenance = json.loads(Hub(hub.url, TOKEN).read_file(repo, "openvino_export.json") or b"{}")
    card = api.model_info(repo).card_data
    whole = (
        needed <= files
        and bool(provenance)
        and card is not None
        and card.to_dict().get("base_model")
        in (provenance.get("source", {}).get("repo"), provenance.get("target", {}).get("repo"))
    )
    return (
        f"complete at {head} ({len(files)} files, card and provenance agree)"
        if whole
        else f"INCONSISTENT at {head}: {sorted(files)}",
        whole,
    )


def namespace_repos(namespace: str) -> Repos:
    """The repos the demo pair is published to under `namespace`."""
    publish = recipe_for(namespace).publish
    return Repos(
        draft=draft_output_repo(publish, demo.DRAFT_REPO, "int4"), target=target_output_repo(publish, demo.TARGET_REPO)
    )


def bundle_for(bundle: Path, folder: Path, repos: Repos) -> Path:
    """A copy of the shared build's bundle at `folder`, its record naming `repos` as a build planned to publish
    there writes it: every scenario publishes the one build to repos of its own, and a publisher commits a record
    only as written for the repos it writes to."""
    shutil.copytree(bundle, folder)
    write(Bundle.read(folder).record.model_copy(update={"repos": repos}), folder)
    return folder


def publish_under_fault(hub, bundle, tmp_path, namespace: str, rules: list[dict]):
    recipe = recipe_for(namespace)
    repos = namespace_repos(namespace)
    copy = bundle_for(bundle, tmp_path / "bundle", repos)
    hub.clear_requests()
    hub.set_faults(rules)
    try:
        result = publish_bundle(
            Hub(hub.url, TOKEN, max_attempts=3, backoff_s=0.05), Bundle.read(copy), repos, private=False
        )
        outcome = f"published ({', '.join(f'{r}@{c[:7]}' for r, c in result.commits)})"
        error = None
    except BotError as exc:
        outcome, error = f"{type(exc).__name__}: {exc.message}", exc
    finally:
        hub.clear_faults()
    fired = sum(1 for r in hub.requests() if r.get("fault"))
    assert fired or not rules, "the fault never fired: the scenario tested nothing"
    return recipe, outcome, error


# The LFS store is content-addressed and shared, so the upload fault must come first: later scenarios find the
# blobs already stored and never PUT them.
FAULTS = [
    ("connection dropped mid LFS upload", [{"method": "PUT", "path": "^/_lfs/upload/", "drop": True}], True),
    ("503 on the first commit", [{"method": "POST", "path": "/commit/", "status": 503}], True),
    ("500 twice on preupload", [{"path": "/preupload/", "status": 500, "times": 2}], True),
    (
        "429 with Retry-After on LFS batch",
        [{"path": r"\.git/info/lfs/objects/batch", "status": 429, "retry_after": 1}],
        True,
    ),
    ("slow answers (2 s) on repo info", [{"path": "^/api/models/[^/]+/[^/]+$", "delay": 2, "times": 2}], True),
    ("412 on commit (a concurrent writer)", [{"method": "POST", "path": "/commit/", "status": 412}], True),
    ("500 on every commit", [{"method": "POST", "path": "/commit/", "status": 500, "times": -1}], False),
    (
        "connection dropped on every LFS negotiation",
        [{"method": "POST", "path": r"lfs/objects/batch", "drop": True, "times": -1}],
        False,
    ),
]


@pytest.mark.parametrize("case,rules,survives", FAULTS, ids=[f[0] for f in FAULTS])
def test_publish_survives_faults_and_leaves_repos_whole(hub, bundle, tmp_path, case, rules, survives):
    namespace = "rel-" + re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")[:40]
    recipe, outcome, error = publish_under_fault(hub, bundle, tmp_path, namespace, rules)
    repos = [
        draft_output_repo(recipe.publish, demo.DRAFT_REPO, "int4"),
        target_output_repo(recipe.publish, demo.TARGET_REPO),
    ]
    states = [repo_state(hub, repo) for repo in repos]
    assert all(whole for _, whole in states), states
    if survives:
        assert error is None, outcome
    else:
        assert isinstance(error, Failure) and "Hub" in error.message
        # The next run (the fault gone) finishes the work.
        recipe, again, error = publish_under_fault(hub, bundle, tmp_path / "again", namespace, [])
        assert error is None, again
        states = [repo_state(hub, repo) for repo in repos]
        assert all(whole and state.startswith("complete") for state, whole in states), states
        outcome += f"; next run: {again}"
    record(
        "fault",
        case,
        outcome,
        "; ".join(f"{r}: {s}" for r, (s, _) in zip(repos, states, strict=True)),
        all(whole for _, whole in states),
    )


def test_listing_faults_are_retried(hub, tmp_path):
    hub.set_faults(
        [
            {"path": "^/api/models$", "status": 503, "times": 2},
            {"path": "openvino_export.json", "status": 429, "retry_after": 1},
        ]
    )
    try:
        report = RunReport()
        plan_step(Hub(hub.url, TOKEN, backoff_s=0.05), BASE, RunOptions(dry_run=True), report)
    finally:
        hub.clear_faults()
    assert not [o for o in report.outcomes if o.status == "failed"], report.outcomes
    record(
        "fault",
        "503 twice on the listing, 429 on a provenance read",
        "retried with backoff; plan completed",
        "unchanged (read-only)",
    )


def _status_after(hub, namespace: str, bundle, rules: list[dict]):
    """Publish the bundle under `namespace`, then write its status page (`pipeline.finish_status`) under faults."""
    from bot.core.outcome import Outcome, Status
    from bot.run.pipeline import finish_status
    from bot.run.run_side import RunMemory, load_memory

    recipe = recipe_for(namespace)
    writer = Hub(hub.url, TOKEN, max_attempts=3, backoff_s=0.05)
    built = Bundle.read(bundle)
    repos = Repos(
        draft=draft_output_repo(recipe.publish, demo.DRAFT_REPO, "int4"),
        target=target_output_repo(recipe.publish, demo.TARGET_REPO),
    )
    hub.clear_requests()
    hub.set_faults(rules)
    try:
        report = RunReport()
        state = RunMemory(
            memory=load_memory(writer, recipe, Fingerprints.of(recipe, card="card"), RunOptions()),
            listed=[demo.DRAFT_REPO],
        )
        report.add(
            Outcome(demo.DRAFT_REPO, built.record.source.revision, Status.UP_TO_DATE, "", [repos.draft, repos.target])
        )
        state.published[demo.DRAFT_REPO] = (built.record, repos)
        finish_status(report, state, writer, recipe, RunOptions())
    finally:
        hub.clear_faults()
    fired = sum(1 for r in hub.requests() if r.get("fault"))
    assert fired or not rules, "the fault never fired"
    return recipe, state, report


STATUS_FAULTS = [
    (
        "500 on every status.json read",
        [{"path": "dflash-bot-status/resolve/", "status": 500, "times": -1}],
        "memory unreadable: every source examined, the page not rewritten blind; the next run wrote it",
    ),
    (
        "412 on the status repo's commit (another run wrote the page)",
        [{"method": "POST", "path": "dflash-bot-status/commit/", "status": 412}],
        "re-read and merged; page written",
    ),
    (
        "500 on every collection call",
        [{"path": "^/api/collections", "status": 500, "times": -1}],
        "the status repo's own outcome failed with the cause; no model touched; next run wrote page and collection",
    ),
]


@pytest.mark.parametrize("case,rules,expected", STATUS_FAULTS, ids=[f[0] for f in STATUS_FAULTS])
def test_status_page_faults_never_touch_the_models_and_the_next_run_heals(hub, bundle, tmp_path, case, rules, expected):
    from bot.status.read import read_status

    namespace = "rel-st-" + re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")[:30]
    recipe, outcome, error = publish_under_fault(hub, bundle, tmp_path, namespace, [])
    assert error is None, outcome
    recipe, state, report = _status_after(hub, namespace, bundle, rules)
    failed = [o for o in report.outcomes if o.status == "failed"]
    if "collection" in case:
        assert failed and failed[0].source == recipe.status_repo_id and "collection" in failed[0].reason
    elif "read" in case:
        assert state.memory.unreadable and report.status_commit is None and not failed
    else:
        assert report.status_commit is not None and not failed
    recipe, state, report = _status_after(hub, namespace, bundle, [])  # the next run, the fault gone
    assert not [o for o in report.outcomes if o.status == "failed"], report.outcomes
    status = read_status(Hub(hub.url, TOKEN), recipe.status_repo_id)
    assert status is not None and status.entry(demo.DRAFT_REPO).status == "published"
    repos = [
        draft_output_repo(recipe.publish, demo.DRAFT_REPO, "int4"),
        target_output_repo(recipe.publish, demo.TARGET_REPO),
    ]
    states = [repo_state(hub, repo) for repo in repos]
    assert all(whole for _, whole in states), states
    record(
        "fault",
        case,
        expected,
        f"status page lists the pair; {'; '.join(s for s, _ in states)}",
        all(whole for _, whole in states),
    )


def _seed_hostile(hub, tmp_path, repo: str, files: dict[str, bytes], drop: tuple[str, ...] = ()) -> None:
    from huggingface_hub import CommitOperationAdd, HfApi

    pair = tmp_path / "hostile"
    if not pair.exists():
        from tinymodels import make_tiny

        make_tiny(SEEDED_KIND, pair, target_repo=demo.TARGET_REPO)  # the seeded target
    if "README.md" in files:
        # A card the Hub refuses (its metadata, issue 33) can only be one it held before it checked: seeded from
        # inside the server rather than committed.
        folder = tmp_path / "seeded" / repo.replace("/", "__")
        shutil.copytree(pair / "draft", folder, ignore=lambda _, names: [n for n in names if n in files or n in drop])
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        hub.seed_folder(repo, folder, title="hostile")
        return
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo(repo, exist_ok=True)
    operations = [
        CommitOperationAdd(p.name, str(p))
        for p in (pair / "draft").iterdir()
        if p.name not in files and p.name not in drop
    ]
    operations += [CommitOperationAdd(name, data) for name, data in files.items()]
    api.create_commit(repo, operations, commit_message="hostile")


def _nested(depth: int) -> bytes:
    return ("[" * depth + "]" * depth).encode()


HOSTILE = [
    ("config.json of 50 MB", {"config.json": b'{"pad": "' + b"x" * (50 * 1024 * 1024) + b'"}'}, None, "limit"),
    ("deeply nested JSON config", {"config.json": b'{"a": ' + _nested(200_000) + b"}"}, None, "nested too deeply"),
    (
        "safetensors header claiming more bytes than the file",
        {"model.safetensors": (10**9).to_bytes(8, "little") + b'{"a": 1}'},
        None,
        "header length",
    ),
    ("a repo listing very many files", {f"shard/{i:05d}.json": b"{}" for i in range(5001)}, None, "5000"),
    ("unicode and very long file names", {"模型" * 50 + ".json": b"{}"}, None, "over 255 bytes"),
    ("sibling names with '..' and absolute paths", {}, ["../../outside.json", "/etc/evil.json"], "unsafe path"),
]


@pytest.mark.parametrize("case,files,siblings,reason", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input_is_a_skip_and_the_run_goes_on(hub, tmp_path, case, files, siblings, reason):
    repo = "z-lab/Qwen3-Tiny-DFlash-" + re.sub(r"[^a-z0-9]+", "-", case.lower())[:30].strip("-")
    _seed_hostile(hub, tmp_path, repo, files)
    if siblings:
        hub.set_faults([{"path": f"^/api/models/{repo}", "extra_siblings": siblings}])
    recipe = recipe_for("rel-hostile")
    before = set(Path(tmp_path).parent.iterdir())
    try:
        report = run(recipe, Hub(hub.url, TOKEN), Hub(hub.url, TOKEN), RunOptions(only=repo, work=tmp_path / "w"))
    finally:
        hub.clear_faults()
    (outcome,) = report.outcomes
    assert outcome.status == "skipped" and reason in outcome.reason, outcome
    assert set(Path(tmp_path).parent.iterdir()) == before
    assert list((tmp_path / "w").iterdir()) == []  # scratch removed
    record("hostile", case, f"skipped: {outcome.reason}", "unchanged; nothing written outside the work dir")


def _card(front_matter: str, text: str = "A DFlash draft.") -> bytes:
    return f"---\n{front_matter}\n---\n\n{text}\n".encode()


def _safetensors_with(header: str) -> bytes:
    data = header.encode()
    return len(data).to_bytes(8, "little") + data + b"\0" * 8


LONG_NAME = "Qwen3-Tiny-DFlash-Hostile-" + "l" * 60  # 86 characters: {name}-int4-ov is over the Hub's 96
CRASHERS = {
    # repo -> (files replacing the draft's, the words its named outcome must carry)
    # A base_model that is a URL is dropped by the card check (the repo name then names the target: the source is
    # planned like any other); one ending in a newline passes huggingface_hub's check and is refused by the bot's.
    "z-lab/Qwen3-Tiny-DFlash-Hostile-url": (
        {"README.md": _card("base_model: https://huggingface.co/Qwen/Qwen3-Tiny")},
        None,
    ),
    "z-lab/Qwen3-Tiny-DFlash-Hostile-newline": (
        {"README.md": _card('base_model: "Qwen/Qwen3-Tiny\\n"')},
        "not a valid Hub repo id",
    ),
    "z-lab/Qwen3.-DFlash-Hostile-dot": ({"README.md": b"A draft with no metadata.\n"}, "Qwen/Qwen3."),
    "z-lab/Qwen3-Tiny-DFlash-Hostile-inf": (
        {
            "config.json": b'{"architectures": ["DFlashDraftModel"], '
            b'"model_type": "qwen3", "hidden_size": Infinity, "dflash_config": '
            b'{"mask_token_id": 3, "target_layer_ids": [1]}}'
        },
        "hidden_size",
    ),
    "z-lab/Qwen3-Tiny-DFlash-Hostile-digits": (
        {"config.json": b'{"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "pad": ' + b"9" * 5000 + b"}"},
        "digits",
    ),
    "z-lab/Qwen3-Tiny-DFlash-Hostile-markup": ({"model.safetensors": None, "x[/b][red].bin": b"not loaded"}, "[/b]"),
}


def test_crash_inputs_are_named_outcomes_and_the_report_is_written(hub, tmp_path):
    """Inputs that used to end a run with a traceback: each is now a named outcome, the report is on disk, and the
    table (with rich markup in a file name) prints."""
    import yaml

    for repo, (files, _) in CRASHERS.items():
        _seed_hostile(
            hub,
            tmp_path,
            repo,
            {k: v for k, v in files.items() if v is not None},
            drop=[k for k, v in files.items() if v is None],
        )
    _seed_hostile(hub, tmp_path, f"z-lab/{LONG_NAME}", {})
    recipe = recipe_for("rel-crash")
    recipe = recipe.model_copy(
        update={
            "watch": recipe.watch.model_copy(
                update={"sources": [recipe.watch.sources[0].model_copy(update={"search": "Hostile"})]}
            )
        }
    )
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(yaml.safe_dump(json.loads(recipe.model_dump_json())))
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "run",
            "--dry-run",
            "--recipe",
            str(recipe_file),
            "--report",
            str(tmp_path / "report.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = {o["source"]: o for o in json.loads((tmp_path / "report.json").read_text())["outcomes"]}
    for repo, (_, words) in CRASHERS.items():
        if words is None:
            assert outcomes[repo]["status"] == "planned", outcomes[repo]
        else:
            assert outcomes[repo]["status"] == "skipped" and words in outcomes[repo]["reason"], outcomes[repo]
    long_one = outcomes[f"z-lab/{LONG_NAME}"]
    assert long_one["status"] == "planned", long_one  # its output name is shortened with a hash, not refused
    assert "x[/b][red].bin" in done.stdout  # printed as text, not parsed as markup
    bad_only = subprocess.run(
        [sys.executable, "-m", "bot.cli", "run", "--only", "not a repo\n", "--recipe", str(recipe_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad_only.returncode == 2 and "Traceback" not in bad_only.stderr and "--only" in bad_only.stderr
    for repo in CRASHERS:
        record(
            "hostile",
            f"{repo.split('Hostile-')[-1]}: crashed the run before",
            f"{outcomes[repo]['status']}: {outcomes[repo]['reason'][:120]}",
            "unchanged; report written, table printed",
        )
    record(
        "hostile",
        "a source name whose output name is over 96 characters",
        "planned; output name shortened deterministically with a hash suffix",
        "unchanged (dry run)",
    )
    record("hostile", "a malformed --only", "refused before any Hub call (exit 2, one line)", "unchanged")


def test_a_hostile_number_in_a_safetensors_header_is_a_skip_after_download_before_export(hub, tmp_path):
    repo = "z-lab/Qwen3-Tiny-DFlash-Hostile-header"
    _seed_hostile(
        hub,
        tmp_path,
        repo,
        {"model.safetensors": _safetensors_with('{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1e400]}}')},
    )
    report = run(
        recipe_for("rel-header"), Hub(hub.url, TOKEN), Hub(hub.url, TOKEN), RunOptions(only=repo, work=tmp_path / "w")
    )
    outcome = next(o for o in report.outcomes if o.source == repo)
    assert outcome.status == "skipped" and "model.safetensors" in outcome.reason, outcome
    assert outcome.stage in ("verify", "classify"), outcome
    record(
        "hostile",
        "1e400 in a safetensors header (crashed the build with OverflowError)",
        f"skipped after download, before any export: {outcome.reason[:110]}",
        "unchanged",
    )


def test_endless_listing_terminates(hub, tmp_path):
    hub.set_faults([{"path": "^/api/models$", "endless_listing": True}])
    try:
        report = RunReport()
        recipe = BASE.model_copy(update={"watch": BASE.watch.model_copy(update={"max_candidates": 20})})
        decisions, _ = plan_step(Hub(hub.url, TOKEN), recipe, RunOptions(dry_run=True), report)
    finally:
        hub.clear_faults()
    listed = [d.listing.repo_id for d in decisions] + [o.source for o in report.outcomes]
    assert len(listed) == len(set(listed))
    record(
        "hostile",
        "a listing page that never ends",
        f"stopped at the radar's max_candidates and each trusted author's MAX_LISTING_PAGES; "
        f"{len(set(listed))} distinct candidates",
        "unchanged (read-only)",
    )


def test_a_commit_lands_only_on_the_commit_its_decision_was_made_on(tmp_path):
    """The publish decision (is this build already there?) is read at one commit, and the commit that follows has
    that commit as its parent: a writer that committed in between makes it a 412, which sends publish back to
    re-read the Hub (it then finds the build there). Without this, two whole runs at once published one draft
    twice: the second read "nothing there", published its target, and then committed on top of the first."""
    from bot.core.errors import PreconditionFailed
    from hubserver import LocalHub

    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    with LocalHub(tmp_path / "hub", "maintainer", TOKEN) as server:
        hub = Hub(server.url, TOKEN)
        assert hub.files_or_none("ns/race") is None  # the decision: no repo yet
        hub.publish_folder("ns/race", folder, message="the other writer", private=False, seen=None)
        with pytest.raises(PreconditionFailed):
            hub.publish_folder("ns/race", folder, message="us", private=False, seen=None)
        seen = hub.files_or_none("ns/race")
        (folder / "a.txt").write_text("b")
        hub.publish_folder(
            "ns/race", folder, message="the other writer again", private=False, seen=hub.files_or_none("ns/race")
        )
        (folder / "a.txt").write_text("ours")
        with pytest.raises(PreconditionFailed):
            hub.publish_folder("ns/race", folder, message="us", private=False, seen=seen)
        titles = [c.title for c in hub.api.list_repo_commits("ns/race")]
        assert titles == ["the other writer again", "the other writer", "initial commit"]
        (folder / "a.txt").write_text("c")
        result = hub.publish_folder("ns/race", folder, message="us", private=False, seen=hub.files_or_none("ns/race"))
        assert result.commit is not None


def test_two_publishers_race_ten_times_one_publish_per_repo_and_two_reports(hub, bundle, tmp_path):
    """The publish race itself, ten rounds: two processes publish the same build to fresh repos at once. Every
    round: both exit 0, one reports published and the other up-to-date, one bot commit per repo."""
    import yaml

    for round_ in range(10):
        namespace = f"rel-race-{round_}"
        hub.add_org(namespace)  # the maintainer is a member of the namespace the runs publish to (their preflight)
        recipe_file = tmp_path / f"recipe-{round_}.yaml"
        recipe_file.write_text(yaml.safe_dump(json.loads(recipe_for(namespace).model_dump_json())))
        copies = []
        for i in range(2):
            copies.append(bundle_for(bundle, tmp_path / f"bundle-{round_}-{i}", namespace_repos(namespace)))
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bot.cli", "publish", "--bundle", str(copy), "--recipe", str(recipe_file)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for copy in copies
        ]
        results = [proc.communicate(timeout=300) for proc in procs]
        assert all(proc.returncode == 0 for proc in procs), "\n----\n".join(err[-2500:] for _, err in results)
        # Both report; the two may share the work (one commits the target, the other the draft), so either may
        # say published, but nothing is published twice.
        statuses = sorted(out.strip().splitlines()[-1].split(":")[0] for out, _ in results)
        assert set(statuses) <= {"published", "up-to-date"} and "published" in statuses, (round_, results)
        api = Hub(hub.url, TOKEN).api
        for repo in (
            draft_output_repo(recipe_for(namespace).publish, demo.DRAFT_REPO, "int4"),
            target_output_repo(recipe_for(namespace).publish, demo.TARGET_REPO),
        ):
            bot_commits = [c for c in api.list_repo_commits(repo) if "dflash-bot" in c.title]
            assert len(bot_commits) == 1, (round_, [c.title for c in api.list_repo_commits(repo)])
            assert repo_state(hub, repo)[1]
    record(
        "concurrency",
        "two publishers of one build at once, 10 rounds (separate processes)",
        "10 of 10: both exit 0 with a report; the loser of each commit race re-read the Hub and went on",
        "one bot commit per repo, complete, every round",
    )


def test_a_publisher_killed_between_the_target_and_the_draft_leaves_no_dangling_link(hub, bundle, tmp_path):
    """SIGKILL while the draft's commit is in flight (the target is committed): every published card links only
    repos that exist, and the next run completes the pair."""
    import signal
    import time

    import yaml

    namespace = "rel-kill"
    hub.add_org(namespace)
    recipe = recipe_for(namespace)
    draft_repo = draft_output_repo(recipe.publish, demo.DRAFT_REPO, "int4")
    target_repo = target_output_repo(recipe.publish, demo.TARGET_REPO)
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(yaml.safe_dump(json.loads(recipe.model_dump_json())))
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    command = [sys.executable, "-m", "bot.cli", "publish", "--recipe", str(recipe_file), "--bundle"]
    bundle_for(bundle, tmp_path / "first", Repos(draft=draft_repo, target=target_repo))
    hub.clear_requests()
    hub.set_faults(
        [{"method": "POST", "path": f"^/api/models/{draft_repo}/(preupload|commit)/", "delay": 20, "times": 1}]
    )
    proc = subprocess.Popen(
        [*command, str(tmp_path / "first")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(
            draft_repo in r["path"] and r["method"] == "POST" and r.get("fault") for r in hub.requests()
        ):
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        hub.clear_faults()
    api = Hub(hub.url, TOKEN).api
    target_card = Hub(hub.url, TOKEN).read_file(target_repo, "README.md").decode()
    draft_exists = api.repo_exists(draft_repo) and "README.md" in api.list_repo_files(draft_repo)
    assert draft_exists or draft_repo not in target_card  # no link to a draft that is not there
    state_after_kill = repo_state(hub, target_repo)
    assert state_after_kill[1], state_after_kill
    bundle_for(bundle, tmp_path / "again", Repos(draft=draft_repo, target=target_repo))
    done = subprocess.run([*command, str(tmp_path / "again")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    target_card = Hub(hub.url, TOKEN).read_file(target_repo, "README.md").decode()
    assert draft_repo in target_card
    states = [repo_state(hub, repo) for repo in (draft_repo, target_repo)]
    assert all(whole for _, whole in states), states
    record(
        "concurrency",
        "publisher SIGKILLed while the draft commit was in flight (target committed)",
        f"target card listed {'the draft (its commit landed)' if draft_exists else 'no draft'}: no dangling "
        f"link; next run: {done.stdout.strip().splitlines()[-1][:80]}",
        "; ".join(f"{r}: {s}" for r, (s, _) in zip((draft_repo, target_repo), states, strict=True)),
    )


def test_actions_handoffs_that_are_not_the_planned_build_are_failures_and_the_rest_publishes(hub, bundle, tmp_path):
    """The publish job's inputs as a build job can leave them: a truncated bundle, a bundle of another revision
    than its entry, a missing artifact, and a plan from another recipe. Each is a failure naming its cause,
    nothing is published from it, and the good bundle in the same run is published."""
    from bot.core.errors import JobError
    from bot.core.outcome import Outcome, Status
    from bot.discover.candidates import Candidate
    from bot.plan.job import BuildJob
    from bot.run.fanout import MatrixEntry, MatrixPlan, PlanReport, load_plan, publish_run
    from bot.run.handoff import BuildOutcomeFile, artifact_name

    recipe = recipe_for("rel-handoff")
    built = Bundle.read(bundle).record

    def job(namespace: str, revision: str | None = None) -> BuildJob:
        candidate = Candidate(
            repo_id=demo.DRAFT_REPO,
            revision=revision or built.source.revision,
            kind="dflash",
            draft_format="stateful",
            target_repo=demo.TARGET_REPO,
            target_revision=built.target.revision,
            target_model_type="qwen3",
            target_is_vlm=False,
            draft_bytes=1,
            target_bytes=1,
            profile="default",
            download_bytes=2,
        )
        return BuildJob(
            candidate=candidate,
            reasons=("new",),
            draft_repo=f"{namespace}/Draft-int4-ov",
            target_repo=f"{namespace}/Target-int4-ov",
        )

    cases = {
        "good": job("rel-handoff"),
        "truncated": job("rel-handoff-trunc"),
        "other-revision": job("rel-handoff-rev", "c" * 40),
        "missing": job("rel-handoff-miss"),
    }
    bundles = tmp_path / "bundles"
    entries = []
    for index, (name, planned_job) in enumerate(cases.items()):
        artifact = f"{artifact_name(demo.TARGET_REPO)}-{index + 1}"
        entries.append(
            MatrixEntry(
                jobs=[planned_job],
                name=name,
                artifact=artifact,
                runner="standard",
                runs_on="ubuntu-latest",
                peak_bytes=1,
            )
        )
        if name == "missing":
            continue
        folder = bundles / artifact / artifact_name(demo.DRAFT_REPO)
        bundle_for(bundle, folder, planned_job.repos)
        outcome = Outcome(demo.DRAFT_REPO, planned_job.revision, Status.BUILT, "", [])
        (folder / "build-outcome.json").write_text(BuildOutcomeFile(job=planned_job, outcome=outcome).model_dump_json())
        if name == "truncated":
            (folder / "draft" / "openvino_model.bin").unlink()
    planned = MatrixPlan(
        recipe=recipe.name,
        recipe_fingerprint=recipe.fingerprint(),
        dry_run=False,
        entries=entries,
        card_refresh=[],
        report=PlanReport(outcomes=[], hub_requests=0, deferred=[]),
    )
    report = publish_run(Hub(hub.url, TOKEN), recipe, bundles, planned)
    statuses = sorted((o.status, o.reason.split(":")[0][:40]) for o in report.outcomes)
    published = [o for o in report.outcomes if o.status == "published"]
    failed = {o.reason for o in report.outcomes if o.status == "failed"}
    assert len(published) == 1 and published[0].repos[0] == "rel-handoff/Draft-int4-ov", statuses
    assert any("incomplete" in r for r in failed) and any("not the planned revisions" in r for r in failed)
    assert any("left no bundle" in r for r in failed) and len(failed) == 3, failed
    api = Hub(hub.url, TOKEN).api
    for namespace in ("rel-handoff-trunc", "rel-handoff-rev", "rel-handoff-miss"):
        assert not api.repo_exists(f"{namespace}/Draft-int4-ov") and not api.repo_exists(f"{namespace}/Target-int4-ov")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.model_dump_json())
    with pytest.raises(JobError, match=r"another recipe|not from"):
        load_plan(plan_file, recipe_for("rel-other").model_copy(update={"name": "other"}))
    for case, reason in (
        ("a truncated bundle artifact (an IR file missing)", "incomplete"),
        ("a bundle whose record names another revision than its matrix entry", "planned revisions"),
        ("a matrix entry whose build job left no artifact", "left no bundle"),
    ):
        record(
            "hostile",
            f"Actions hand-off: {case}",
            f"failed: {next(r for r in failed if reason in r)[:110]}; the good bundle of the same run published",
            "nothing published from it",
        )
    record(
        "hostile",
        "Actions hand-off: a plan record made from another recipe",
        "refused before anything is published (JobError naming both recipes)",
        "unchanged",
    )


def test_build_processes_refuse_to_run_with_a_token_in_reach():
    env = {**os.environ, "HF_TOKEN": CANARY}
    done = subprocess.run(
        [sys.executable, "-m", "bot.sandbox.child", "bot.builder.validate", "--help"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 70 and "HF_TOKEN" in done.stderr and CANARY not in done.stderr
    record(
        "security",
        "a checkpoint-loading process started with a token in its environment",
        "refused to start (exit 70), naming the variable, not its value",
        "unchanged",
    )


def test_canary_token_never_leaks_and_no_code_or_pickle_is_fetched(hub, tmp_path):
    """A full run as a subprocess holding a canary token: logs, report, summary, cards, files stay clean."""
    marker = tmp_path / "unpickled"

    class Exploit:
        def __reduce__(self):
            return (Path.touch, (marker,))

    _seed_hostile(
        hub,
        tmp_path,
        "z-lab/Qwen3-Tiny-DFlash-pickled",
        {"pytorch_model.bin": pickle.dumps(Exploit()), "dflash.py": b"raise SystemExit('ran')"},
    )
    recipe_file = tmp_path / "recipe.yaml"
    import yaml

    recipe_file.write_text(yaml.safe_dump(json.loads(recipe_for("rel-canary").model_dump_json())))
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": CANARY,
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output),
    }
    hub.clear_requests()
    done = subprocess.run(
        run_command(recipe_file, tmp_path / "report.json", only="z-lab/Qwen3-Tiny-DFlash-pickled", work=tmp_path / "w"),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["outcomes"][0]["status"] == "published", report
    assert not marker.exists()
    fetched = [r["path"] for r in hub.requests() if r["method"] in ("GET", "HEAD") and "/resolve/" in r["path"]]
    assert fetched and not [
        p
        for p in fetched
        if (p.endswith((".py", ".bin", ".pt", ".pkl")) and "/z-lab/" in p)
        or (p.startswith("/z-lab/") and p.endswith((".py", ".bin")))
    ]
    published = Path(
        Hub(hub.url, TOKEN).api.snapshot_download(
            draft_output_repo(recipe_for("rel-canary").publish, "z-lab/Qwen3-Tiny-DFlash-pickled", "int4"),
            local_dir=tmp_path / "pub",
        )
    )

    # `::add-mask::VALUE` is the command that tells the Actions runner to mask VALUE; the runner consumes it and
    # it never reaches the displayed log, so it is the one place the value may appear.
    def shown(text: str) -> str:
        return "\n".join(line for line in text.splitlines() if not re.match(r"::add-mask\s*::", line))

    texts = [shown(done.stdout), shown(done.stderr), (tmp_path / "report.json").read_text()]
    texts += [p.read_text(errors="replace") for p in (summary, output) if p.exists()]
    texts += [p.read_text(errors="replace") for p in published.rglob("*") if p.is_file() and ".cache" not in p.parts]
    assert not [line for t in texts for line in t.splitlines() if CANARY in line]
    assert find_local_paths(published, local_path_markers(tmp_path)) == []
    record(
        "security",
        "canary token in the environment of a full run; a pickle exploit and a .py in the source",
        "published; the canary appears in no log, report, summary, card or file; no .py or pickle fetched; "
        "nothing unpickled; no local path in published files",
        "complete",
    )
