"""Issue 11's hostile checkpoints, as real runs: a tokenizer path outside the checkout, and the write token
reached through `/proc` from a checkpoint-loading child.

The exports here are real optimum-cli runs in the real sandbox; strace (when installed) records every `open` the
processes attempt, so "nothing outside the folder was opened" is observed, not inferred.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.core.settings import Settings
from bot.discover.fetch import safe_copy
from bot.discover.sanitize import sanitize_folder, unsafe_path_reason
from bot.sandbox.confinement import confinement
from bot.sandbox.reaper import CGROUP_PREFIX, cgroup_folder

CANARY_TOKEN = "SECRETCANARYTOKEN"
REPO = Path(__file__).resolve().parents[2]


def _hostile_target(tiny, root: Path) -> tuple[Path, Path]:
    """A tiny target whose tokenizer_config.json names a tokenizer file outside the checkout (with a canary)."""
    target = tiny("dflash").target
    secret = root / "outside" / "tokenizer.json"
    secret.parent.mkdir(parents=True)
    tokenizer = json.loads((target / "tokenizer.json").read_text())
    tokenizer["added_tokens"].append(
        {
            "id": len(tokenizer["model"]["vocab"]) + 64,
            "content": CANARY_TOKEN,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    secret.write_text(json.dumps(tokenizer))
    source = root / "source"
    shutil.copytree(target, source)
    config = json.loads((source / "tokenizer_config.json").read_text())
    config["tokenizer_file"] = str(secret)
    (source / "tokenizer_config.json").write_text(json.dumps(config))
    return source, secret


_EXPORT = textwrap.dedent("""
    import sys
    from pathlib import Path
    import os
    from bot.builder.export import TASK_LLM, ExportRequest, export_model
    from bot.core.recipe import load_recipe
    from bot.core.settings import Settings
    copy, work = Path(sys.argv[1]), Path(sys.argv[2])
    export_model(ExportRequest("target", copy, work / "ir", TASK_LLM, False), load_recipe().export,
                 log_dir=work / "logs", home=work / "hf", layers=Settings.from_env(os.environ).sandbox_layers)
""")


def _export_traced(copy: Path, work: Path, env: dict | None = None) -> list[str]:
    """Run the real sandboxed export of `copy`; the strace lines of every open it attempted ([] without strace)."""
    command = [sys.executable, "-c", _EXPORT, str(copy), str(work)]
    trace = work / "strace.log"
    if shutil.which("strace"):
        command = [
            "strace",
            "-f",
            "--seccomp-bpf",
            "-qq",
            "-e",
            "trace=open,openat,openat2",
            "-e",
            "signal=none",
            "-o",
            str(trace),
            *command,
        ]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return _joined(trace.read_text().splitlines()) if trace.exists() else []


def _joined(lines: list[str]) -> list[str]:
    """strace -f splits a call another thread interrupted into `... <unfinished ...>` and `<... openat resumed>
    ... = result`: put each such call back on one line, so its result is read with its path."""
    pending: dict[str, str] = {}
    calls = []
    for line in lines:
        pid = line.split(maxsplit=1)[0] if line.strip() else ""
        if line.endswith("<unfinished ...>"):
            pending[pid] = line.removesuffix("<unfinished ...>")
        elif "resumed>" in line and pid in pending:
            calls.append(pending.pop(pid) + line.split("resumed>", 1)[1])
        else:
            calls.append(line)
    return calls + list(pending.values())


def _files_with(folder: Path, needle: bytes) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_the_hostile_tokenizer_path_is_followed_by_the_loader_unless_removed(tiny, tmp_path):
    """The fixture is a real attack: transformers loads the outside file; after safe_copy it loads the folder's."""
    from transformers import AutoTokenizer

    source, _ = _hostile_target(tiny, tmp_path)
    assert CANARY_TOKEN in AutoTokenizer.from_pretrained(source).get_vocab()
    copy = safe_copy(source, tmp_path / "copy")
    assert "tokenizer_file" not in json.loads((copy / "tokenizer_config.json").read_text())
    assert CANARY_TOKEN not in AutoTokenizer.from_pretrained(copy).get_vocab()


@pytest.mark.slow  # a real export of the hostile target, traced
def test_the_tokenizer_path_attack_builds_without_opening_the_outside_file(tiny, tmp_path):
    source, secret = _hostile_target(tiny, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    copy = safe_copy(source, work / "copy")
    opens = _export_traced(copy, work)
    assert not [line for line in opens if str(secret.parent) in line]
    if opens:  # every file the export opened successfully is its input, its work folder, Python or the system
        allowed = _allowed_roots(work)
        outside = {path for path in _opened_paths(opens) if not path.startswith(allowed) and path + "/" not in allowed}
        assert not outside, sorted(outside)[:20]
        # Temp files, caches and OpenVINO's telemetry state all stay in the work folder (unshare writes its own
        # namespace's uid/gid maps; the reaper, before it execs the child, puts it in the child's own cgroup).
        own_cgroup = str(cgroup) + "/" + CGROUP_PREFIX if (cgroup := cgroup_folder()) is not None else str(work)
        written = {
            path
            for path in _opened_paths(opens, writes=True)
            if not path.startswith((str(work), "/dev/", "/proc/self/", own_cgroup))
        }
        assert not written, sorted(written)[:20]
        assert (work / "hf" / "home" / "intel" / "openvino_telemetry").read_text() == "0"
    assert (work / "ir" / "openvino_tokenizer.xml").is_file()
    assert _files_with(work / "ir", CANARY_TOKEN.encode()) == []
    assert b"Landlock ABI" in (work / "logs" / "export-target.log").read_bytes() or confinement().landlock_abi == 0


@pytest.mark.skipif(confinement().landlock_abi == 0, reason="the kernel has no Landlock")
@pytest.mark.slow  # a real export of the hostile target, traced
def test_landlock_alone_stops_the_loader_from_reading_outside(tiny, tmp_path):
    """Second layer: the field left in place (no sanitising), the OS refuses the open and nothing leaks."""
    source, secret = _hostile_target(tiny, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    copy = work / "copy"
    shutil.copytree(source, copy)  # deliberately not safe_copy
    opens = _export_traced(copy, work, env={"DFLASH_BOT_SANDBOX": "landlock"})
    attempts = [line for line in opens if str(secret) in line]
    if shutil.which("strace"):
        assert attempts, "the loader never tried the outside path: the test no longer exercises the attack"
    assert all("EACCES" in line for line in attempts), attempts
    assert _files_with(work / "ir", CANARY_TOKEN.encode()) == []


def test_path_valued_fields_that_leave_the_folder_are_removed(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_file": "/etc/passwd",
                "vocab_file": "../../secret",
                "merges_file": "merges.txt",
                "name_or_path": "~/models/x",
                "chat_template": "{{ '/etc/passwd' }}",
                "nested": {"spm_file": "C:\\\\secret", "extra_files": ["ok.txt", "https://evil.example/x"]},
            }
        )
    )
    (tmp_path / "config.json").write_text(json.dumps({"_name_or_path": "/home/author/model", "hidden_size": 8}))
    removed = {str(field) for field in sanitize_folder(tmp_path)}
    assert removed == {
        "tokenizer_config.json: tokenizer_file (is an absolute path)",
        "tokenizer_config.json: vocab_file (escapes the checkpoint folder)",
        "tokenizer_config.json: name_or_path (is relative to a home directory)",
        "tokenizer_config.json: nested.spm_file (is an absolute path)",
        "tokenizer_config.json: nested.extra_files (is a URL)",
        "config.json: _name_or_path (is an absolute path)",
    }
    kept = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert kept == {"merges_file": "merges.txt", "chat_template": "{{ '/etc/passwd' }}", "nested": {}}
    assert json.loads((tmp_path / "config.json").read_text()) == {"hidden_size": 8}
    assert unsafe_path_reason("sub/../tokenizer.json") is None


def test_a_weight_map_pointing_outside_is_refused(tmp_path):
    from bot.core.errors import Skip

    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "../../../root/model.safetensors"}})
    )
    with pytest.raises(Skip, match="shard that escapes the checkpoint folder"):
        sanitize_folder(tmp_path, subject="x/y")


def _allowed_roots(work: Path) -> tuple[str, ...]:
    python = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent), str(REPO)}
    system = (
        "/usr/",
        "/lib",
        "/bin/",
        "/sbin/",
        "/proc/",
        "/sys/",
        "/dev/",
        "/etc/ld.so",
        "/etc/localtime",
        "/etc/passwd",
        "/etc/group",
        "/etc/nsswitch.conf",
        "/etc/os-release",
        "/etc/timezone",
        "/etc/mime.types",
    )
    return (str(work), *sorted(python), *system)


def _opened_paths(lines: list[str], *, writes: bool = False) -> set[str]:
    """Absolute paths opened successfully (`= fd`), from strace lines; with `writes`, every attempt to open one
    for writing, refused or not."""
    paths = set()
    result = r"-?\d+" if writes else r"\d+"
    for line in lines:
        if writes and not re.search(r"O_WRONLY|O_RDWR|O_CREAT", line):
            continue
        match = re.search(rf'open(?:at2?)?\((?:AT_FDCWD|\d+), "([^"]+)".*\) = {result}', line) or re.search(
            rf'open\("([^"]+)".*\) = {result}', line
        )
        if match and match.group(1).startswith("/"):
            paths.add(match.group(1))
    return paths


# ---- the write token through /proc ----

# Runs in the sandboxed child. The canary arrives reversed, so no command line or script text holds it.
_PROBE = textwrap.dedent(r"""
    import json, os, re, sys
    canary = sys.argv[1][::-1].encode()
    top, given = int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
    me = os.getpid()

    def read(path, limit=1 << 22):
        try:
            with open(path, "rb") as handle:
                return handle.read(limit), None
        except OSError as exc:
            return b"", type(exc).__name__

    def ppid(pid):
        data, _ = read(f"/proc/{pid}/stat")
        return int(data.rsplit(b")", 1)[1].split()[1]) if data else 0

    try:
        visible = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    except OSError:
        visible = []
    ancestors, pid = [], ppid(me)
    while pid > 0 and len(ancestors) < 8:
        ancestors.append(pid)
        if pid == top:
            break
        pid = ppid(pid)
    relatives = {p for p in visible if ppid(p) in ancestors}
    targets = sorted((set(given) | set(ancestors) | relatives) - {me})
    found, denied, checked = [], 0, 0
    for pid in targets:
        for name in ("environ", "cmdline"):
            data, error = read(f"/proc/{pid}/{name}")
            checked += 1
            denied += error is not None
            if canary in data:
                found.append(f"{pid}/{name}")
        maps, error = read(f"/proc/{pid}/maps")
        try:
            mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
        except OSError:
            denied += 1
            continue
        with mem:
            for line in maps.decode().splitlines():
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if perms[0] != "r" or end - start > 1 << 28 or "[vvar" in line:
                    continue
                try:
                    mem.seek(start)
                    if canary in mem.read(end - start):
                        found.append(f"{pid}/mem")
                        break
                except (OSError, OverflowError, ValueError):
                    pass
    for fd in os.listdir("/proc/self/fd"):
        checked += 1
        try:
            if os.path.isfile(f"/proc/self/fd/{fd}") and canary in os.pread(int(fd), 1 << 22, 0):
                found.append(f"fd {fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass
    if canary in read("/proc/self/environ")[0]:
        found.append("own environ")
    print(json.dumps({"found": found, "visible": len(visible), "targets": len(targets), "checked": checked,
                      "denied": denied, "pid": me}))
""")

# The token-free build side: checks its own view, then runs the probe the way it runs an export.
_BUILDER = textwrap.dedent(r"""
    import json, os, sys
    from pathlib import Path
    from huggingface_hub import get_token
    from bot.core.settings import Settings
    from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env
    layers = Settings.from_env(os.environ).sandbox_layers  # a process of its own: DFLASH_BOT_SANDBOX from its env
    work, reversed_canary, top = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    canary = reversed_canary[::-1]
    own = open("/proc/self/environ", "rb").read()
    view = {"env": canary.encode() in own or canary in os.environ.values(), "get_token": get_token() is not None}
    try:
        view["holder_environ"] = canary.encode() in open(f"/proc/{top}/environ", "rb").read()
    except OSError:
        view["holder_environ"] = False
    (work / "builder.json").write_text(json.dumps(view))
    # The control runs the probe with no sandbox at all (a mode without OS layers may be refused here).
    unconfined = os.environ.get("PROBE_UNSANDBOXED") == "1"
    command = [] if unconfined else sandboxed("exec", reads=[], writes=[work / "probe"], layers=layers)
    env = untrusted_env(home=work / "probe" / "hf")
    probe = lambda: run_logged([*command, sys.executable, "-c", sys.argv[4], reversed_canary, top, *sys.argv[5:]],
                               log_path=work / "probe.log", timeout_s=120, env=env, what="probe")
    if (work / "with-sibling").exists():  # a group build: another child of the builder runs beside it
        import threading, time
        sibling = sandboxed("exec", reads=[], writes=[work / "sibling"], layers=layers)
        threading.Thread(target=run_logged, args=([*sibling, "sleep", "5"],), daemon=True,
                         kwargs=dict(log_path=work / "sibling.log", timeout_s=60, env=env, what="sibling")).start()
        time.sleep(0.5)
        probe()
    else:
        probe()
""")

# The process that publishes: holds the token, starts a sibling that keeps it in its environment (the worst case
# for the probe), and the builder tree through start_builder.
_HOLDER = textwrap.dedent(r"""
    import json, os, subprocess, sys
    from pathlib import Path
    from bot.core.settings import Settings
    from bot.sandbox.confinement import hold_write_token, start_builder
    work, builder_script, probe_script = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    layers = Settings.from_env(os.environ).sandbox_layers
    token = hold_write_token()
    scrubbed = token.encode() not in open("/proc/self/environ", "rb").read() and "HF_TOKEN" not in os.environ
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                               env={**os.environ, "HF_TOKEN": token})
    try:
        builder = start_builder([sys.executable, "-c", builder_script, str(work), token[::-1], str(os.getpid()),
                                 probe_script, str(os.getpid()), str(sibling.pid)], layers=layers)
        code = builder.wait(timeout=300)
    finally:
        sibling.kill()
    (work / "holder.json").write_text(json.dumps({"token_kept": token.startswith("hf_"), "scrubbed": scrubbed}))
    sys.exit(code)
""")


def _layer_cases() -> list:
    available = confinement()
    cases = []
    for layers in ("auto", "namespaces", "landlock"):
        works = {
            "auto": available.name != "none",
            "namespaces": available.namespaces,
            "landlock": available.landlock_abi > 0,
        }[layers]
        cases.append(pytest.param(layers, marks=pytest.mark.skipif(not works, reason=f"no {layers} here")))
    return cases


def _run_holder(
    tmp_path: Path, layers: str, *, with_sibling: bool = False, unsandboxed: bool = False
) -> tuple[dict, dict, dict]:
    if with_sibling:
        (tmp_path / "with-sibling").touch()
    canary = "hf_canary" + os.urandom(12).hex()
    env = {**os.environ, "HF_TOKEN": canary, "DFLASH_BOT_SANDBOX": layers, "PROBE_UNSANDBOXED": str(int(unsandboxed))}
    result = subprocess.run(
        [sys.executable, "-c", _HOLDER, str(tmp_path), _BUILDER, _PROBE],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    log = (tmp_path / "probe.log").read_text() if (tmp_path / "probe.log").exists() else ""
    assert result.returncode == 0, result.stderr[-3000:] + log[-2000:]
    probe = json.loads(log.strip().splitlines()[-1])
    return (
        json.loads((tmp_path / "holder.json").read_text()),
        json.loads((tmp_path / "builder.json").read_text()),
        probe,
    )


@pytest.mark.parametrize("layers", _layer_cases())
def test_a_sandboxed_child_cannot_read_the_write_token_through_proc(tmp_path, layers):
    holder, builder, probe = _run_holder(tmp_path, layers)
    assert holder == {"token_kept": True, "scrubbed": True}
    assert builder == {"env": False, "get_token": False, "holder_environ": False}
    assert probe["found"] == [], probe
    assert probe["checked"] > 0
    if layers in ("auto", "namespaces") and confinement().namespaces:
        assert probe["pid"] == 1 and probe["visible"] <= 2, probe  # its own PID namespace: no ancestor in sight
    if layers == "landlock":
        assert probe["pid"] != 1 and probe["visible"] == 0, probe  # host PIDs, but /proc is closed to it


@pytest.mark.parametrize("layers", _layer_cases())
def test_a_child_beside_a_sibling_child_cannot_read_the_write_token_through_proc(tmp_path, layers):
    """The layout of a group build: the probe runs while a sibling child of the same builder runs; each is a fresh
    process in its own namespaces, so neither sees the other, nor anything above the builder."""
    holder, builder, probe = _run_holder(tmp_path, layers, with_sibling=True)
    assert holder == {"token_kept": True, "scrubbed": True}
    assert builder == {"env": False, "get_token": False, "holder_environ": False}
    assert probe["found"] == [], probe
    assert probe["checked"] > 0
    if layers in ("auto", "namespaces") and confinement().namespaces:
        assert probe["pid"] == 1 and probe["visible"] <= 2, probe  # the sibling is in a namespace of its own
    if layers == "landlock":
        assert probe["visible"] == 0, probe  # /proc is closed to it but for its own entries


def test_without_confinement_the_probe_does_find_the_token(tmp_path):
    """Control: the same probe, unconfined, reads the sibling's environment; the probe is not blind."""
    holder, builder, probe = _run_holder(tmp_path, "none", unsandboxed=True)
    assert holder["scrubbed"] and not builder["env"]
    assert any(place.endswith("/environ") for place in probe["found"]), probe


# ---- hostile cards through a real build ----


@pytest.mark.slow  # a real build of the pair
def test_injected_license_and_alias_bomb_leave_small_records_and_well_formed_cards(tiny, tmp_path):
    """A real build of a pair whose draft card injects markup into `license` and whose target card is an alias
    bomb: the provenance stays small, and the cards rendered from it parse to the metadata meant, with none of the
    injected text."""
    from huggingface_hub import ModelCard

    from bot.builder.draft_build import Checkout, DraftBuild
    from bot.builder.group import build_group
    from bot.core.record import Repos, TargetRecord
    from bot.discover.candidates import classify_folders
    from bot.plan.job import BuildJob
    from bot.publish.card import render_draft_card, render_target_card
    from tests.conftest import fast_recipe
    from tests.discover.test_source_card import ALIAS_BOMB, INJECTED_LICENSE

    pair = tiny("dflash")
    draft, target = tmp_path / "draft", tmp_path / "target"
    shutil.copytree(pair.draft, draft)
    shutil.copytree(pair.target, target)
    (draft / "README.md").write_text(f"---\n{INJECTED_LICENSE}---\n# Draft\n")
    (target / "README.md").write_text(ALIAS_BOMB)
    candidate = classify_folders(draft, target, fast_recipe())
    (outcome,) = build_group(
        Checkout(target, "Qwen/Qwen3-Tiny", "1" * 40),
        [
            DraftBuild(
                BuildJob.local(candidate), Checkout(draft, "z-lab/Qwen3-Tiny-DFlash-b16", "2" * 40), tmp_path / "bundle"
            )
        ],
        fast_recipe(),
        work=tmp_path,
    )
    assert outcome.bundle is not None, outcome.error and outcome.error.one_line()
    record = outcome.bundle.root / "openvino_export.json"
    assert record.stat().st_size < 64 * 1024
    provenance = json.loads(record.read_text())
    assert (provenance["source"]["license"], provenance["source"]["license_link"]) == (None, None)
    assert (provenance["target"]["license"], provenance["target"]["license_link"]) == (None, None)
    built = outcome.bundle.record
    repos = Repos(draft="bot/Qwen3-Tiny-DFlash-b16-int4-ov", target="bot/Qwen3-Tiny-int4-ov")
    cards = [
        render_draft_card(built.published_as(repos, "fp")),
        render_target_card(TargetRecord.from_build(built, [], "fp"), target_repo=repos.target),
    ]
    for text, base in zip(cards, ("z-lab/Qwen3-Tiny-DFlash-b16", "Qwen/Qwen3-Tiny"), strict=True):
        assert len(text) < 64 * 1024
        for injected in ("Pwned", "onerror", "javascript:", "evil.example", "lol"):
            assert injected not in text
        metadata = ModelCard(text).data.to_dict()
        assert metadata["base_model"] == base and "license" not in metadata and "license_link" not in metadata


def test_builder_env_keeps_the_read_token_only_and_hides_a_stored_token():
    from bot.sandbox.confinement import builder_env

    env = builder_env(
        {"HF_TOKEN": "w", "HUGGING_FACE_HUB_TOKEN": "w", "GITHUB_TOKEN": "g", "HF_READ_TOKEN": "r", "PATH": "/bin"}
    )
    assert env["HF_READ_TOKEN"] == "r" and env["PATH"] == "/bin"
    assert not {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN"} & set(env)
    assert env["HF_TOKEN_PATH"] == os.devnull


def test_the_sandbox_setting_names_layers_and_the_fallback():
    assert Settings.from_env({}).sandbox_layers == ("namespaces", "landlock")
    assert Settings.from_env({"DFLASH_BOT_SANDBOX": "none"}).sandbox_layers == ()
    with pytest.raises(ValueError, match="unknown layer 'bwrap'"):
        Settings.from_env({"DFLASH_BOT_SANDBOX": "bwrap"})
    off = confinement(Settings.from_env({"DFLASH_BOT_SANDBOX": "none"}).sandbox_layers)
    assert off.name == "none" and "no OS confinement" in off.describe() and "switched off" in off.detail
