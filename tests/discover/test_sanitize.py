"""bot.discover.sanitize: outside paths removed from a working copy's JSON files, weight maps refused, symlinks and
data files left alone (real files in tmp_path)."""

from __future__ import annotations

import json

import pytest

from bot.core.errors import Skip, Stage
from bot.discover import sanitize
from bot.discover.sanitize import RemovedField, sanitize_folder, unsafe_path_reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("tokenizer.json", None),
        ("sub/vocab.txt", None),
        ("./a/../b.txt", None),
        ("/etc/passwd", "is an absolute path"),
        ("C:\\secrets.txt", "is an absolute path"),
        ("\\\\server\\share", "is an absolute path"),
        ("~/.ssh/id_rsa", "is relative to a home directory"),
        ("https://example.com/vocab", "is a URL"),
        ("../outside.json", "escapes the checkpoint folder"),
        ("a/../../outside.json", "escapes the checkpoint folder"),
        ("..", "escapes the checkpoint folder"),
        ("..\\x", "escapes the checkpoint folder"),
        ("a\0b", "contains a NUL byte"),
    ],
)
def test_unsafe_path_reason(value, reason):
    assert unsafe_path_reason(value) == reason


def write(path, data) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


def test_removes_outside_paths_at_any_depth(tmp_path):
    write(
        tmp_path / "tokenizer_config.json",
        {
            "tokenizer_file": "/home/runner/.token",
            "vocab_file": "vocab.txt",
            "model_max_length": 512,
            "nested": {"merges_file": "../merges.txt", "keep": "/not/a/path/key"},
            "extra": [{"spm_file": "~/x.model"}],
            "added_tokens_files": ["ok.json", "/abs.json"],
        },
    )
    removed = sanitize_folder(tmp_path)
    assert removed == (
        RemovedField("tokenizer_config.json", "tokenizer_file", "is an absolute path"),
        RemovedField("tokenizer_config.json", "nested.merges_file", "escapes the checkpoint folder"),
        RemovedField("tokenizer_config.json", "extra[0].spm_file", "is relative to a home directory"),
        RemovedField("tokenizer_config.json", "added_tokens_files", "is an absolute path"),
    )
    assert str(removed[0]) == "tokenizer_config.json: tokenizer_file (is an absolute path)"
    cleaned = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert cleaned == {
        "vocab_file": "vocab.txt",
        "model_max_length": 512,
        "nested": {"keep": "/not/a/path/key"},
        "extra": [{}],
    }


def test_clean_files_are_not_rewritten(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"_name_or_path": "Qwen/Qwen3-Tiny",   "x": 1}', encoding="utf-8")
    assert sanitize_folder(tmp_path) == ()
    assert path.read_text(encoding="utf-8") == '{"_name_or_path": "Qwen/Qwen3-Tiny",   "x": 1}'


def test_name_or_path_that_is_absolute_is_removed(tmp_path):
    write(tmp_path / "config.json", {"_name_or_path": "/models/qwen", "hidden_size": 8})
    assert [f.key for f in sanitize_folder(tmp_path)] == ["_name_or_path"]
    assert json.loads((tmp_path / "config.json").read_text(encoding="utf-8")) == {"hidden_size": 8}


def test_data_files_symlinks_and_unparsable_files_are_left(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "real.json"
    write(target, {"tokenizer_file": "/etc/passwd"})
    folder = tmp_path / "copy"
    folder.mkdir()
    write(folder / "tokenizer.json", {"tokenizer_file": "/etc/passwd"})
    (folder / "linked.json").symlink_to(target)
    (folder / "broken.json").write_text("{not json", encoding="utf-8")
    assert sanitize_folder(folder) == ()
    assert json.loads(target.read_text(encoding="utf-8")) == {"tokenizer_file": "/etc/passwd"}
    assert json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")) == {"tokenizer_file": "/etc/passwd"}
    assert (folder / "broken.json").read_text(encoding="utf-8") == "{not json"


def test_oversized_json_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitize, "MAX_JSON_BYTES", 10)
    write(tmp_path / "config.json", {"hidden_size": 123456})
    with pytest.raises(Skip, match="over the 10-byte limit") as caught:
        sanitize_folder(tmp_path, subject="org/model")
    assert caught.value.subject == "org/model"
    assert caught.value.stage is Stage.FETCH


def test_weight_map_inside_the_folder_is_kept(tmp_path):
    index = {"weight_map": {"a": "model-00001.safetensors", "b": "model-00002.safetensors"}}
    write(tmp_path / "model.safetensors.index.json", index)
    assert sanitize_folder(tmp_path) == ()


@pytest.mark.parametrize(
    ("shard", "reason"),
    [
        ("/data/model.safetensors", "is an absolute path"),
        ("../model.safetensors", "escapes the checkpoint folder"),
        ("sub/model.safetensors", "is not a top-level file of the checkpoint"),
        (7, "is not a file name"),
    ],
)
def test_weight_map_pointing_outside_is_refused(tmp_path, shard, reason):
    write(tmp_path / "model.safetensors.index.json", {"weight_map": {"lm_head.weight": shard}})
    with pytest.raises(Skip, match=f"maps 'lm_head.weight' to a shard that {reason}: refused") as caught:
        sanitize_folder(tmp_path, subject="org/model")
    assert caught.value.stage is Stage.FETCH
