"""tinymodels.hub_layouts: one checkout per draft layout, each what discovery reads (config, card, weights header)."""

from __future__ import annotations

from bot.discover.checkpoints import classify_draft, load_config
from bot.discover.weights import check_weights
from tinymodels.hub_layouts import LAYOUT_REPOS, tiny_safetensors, write_repo


def test_each_layout_checkout_is_whole_and_classifies_as_its_layout(tmp_path):
    assert len({repo.layout for repo in LAYOUT_REPOS}) >= 11 and len({r.repo_id for r in LAYOUT_REPOS}) == len(
        LAYOUT_REPOS
    )
    for repo in LAYOUT_REPOS:
        folder = write_repo(tmp_path / repo.repo_id.replace("/", "__"), repo.config, repo.base_model)
        assert check_weights(folder) == len(tiny_safetensors())
        assert classify_draft(load_config(folder)).layout == repo.layout
        card = (folder / "README.md").read_text()
        assert (f"base_model: {repo.base_model}\n" in card) if repo.base_model else "base_model" not in card
