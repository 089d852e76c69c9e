"""Working copies of checkpoints: freeing the source weights once the IRs are written."""

from __future__ import annotations

from bot.discover.fetch import release_weights, safe_copy
from bot.sandbox.resources import disk_used


def test_release_weights_frees_the_downloaded_and_linked_weights_only(tiny, tmp_path):
    pair = tiny("dflash")
    download = tmp_path / "download"
    safe_copy(pair.target, download)  # stands in for the download: real files
    working = safe_copy(download, tmp_path / "src")  # the build's working copy: hard links to the download
    weights = (download / "model.safetensors").stat().st_size
    before = disk_used(tmp_path)
    assert release_weights(download, working) == weights
    assert not list(tmp_path.rglob("*.safetensors"))
    assert (working / "config.json").is_file() and (working / "tokenizer.json").is_file()
    assert before - disk_used(tmp_path) >= weights  # hard-linked once, freed once all links are gone
