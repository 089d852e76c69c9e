"""The JSON shapes huggingface_hub 1.21.0 parses: repo info, listing items, tree entries, commits and refs.

Field names and which fields appear follow the real Hub: a listing item carries few fields unless `expand` asks
for more, and model_info shows file sizes and LFS details only with
`blobs=true` (`files_metadata=True` in the client). Code tested against these shapes therefore asks for what it
needs, as it must against huggingface.co.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from . import errors
from .gitobjects import tree_sha1
from .metadata import CommitMetadata
from .storage import Commit, FileEntry, Repo

# Fields of a listing item without `expand`, per repo type.
_LIST_FIELDS = {
    "model": ("id", "modelId", "private", "likes", "downloads", "trendingScore", "tags", "pipeline_tag",
              "library_name", "createdAt"),
    "dataset": ("id", "author", "sha", "lastModified", "private", "gated", "disabled", "likes", "downloads",
                "trendingScore", "tags", "createdAt"),
    "space": ("id", "author", "sha", "lastModified", "private", "likes", "trendingScore", "tags", "createdAt", "sdk"),
}  # fmt: skip


# huggingface_hub 1.21.0's ExpandModelProperty_T, ExpandDatasetProperty_T and ExpandSpaceProperty_T (hf_api.py).
EXPAND_FIELDS = {
    "model": frozenset(
        [
            "author",
            "baseModels",
            "cardData",
            "childrenModelCount",
            "config",
            "createdAt",
            "disabled",
            "downloads",
            "downloadsAllTime",
            "evalResults",
            "gated",
            "gguf",
            "inference",
            "inferenceProviderMapping",
            "lastModified",
            "library_name",
            "likes",
            "mask_token",
            "model-index",
            "pipeline_tag",
            "private",
            "resourceGroup",
            "safetensors",
            "sha",
            "siblings",
            "spaces",
            "tags",
            "transformersInfo",
            "trendingScore",
            "usedStorage",
            "widgetData",
        ]
    ),
    "dataset": frozenset(
        [
            "author",
            "cardData",
            "citation",
            "createdAt",
            "description",
            "disabled",
            "downloads",
            "downloadsAllTime",
            "gated",
            "lastModified",
            "likes",
            "mainSize",
            "paperswithcode_id",
            "private",
            "resourceGroup",
            "sha",
            "siblings",
            "tags",
            "trendingScore",
            "usedStorage",
        ]
    ),
    "space": frozenset(
        [
            "author",
            "cardData",
            "createdAt",
            "datasets",
            "disabled",
            "lastModified",
            "likes",
            "models",
            "private",
            "resourceGroup",
            "runtime",
            "sdk",
            "sha",
            "siblings",
            "subdomain",
            "tags",
            "trendingScore",
            "usedStorage",
        ]
    ),
}
_INFO_ONLY_EXPAND = frozenset({"baseModels", "childrenModelCount", "usedStorage"})


def repo_url(base_url: str, repo_type: str, repo_id: str) -> str:
    """A repo's web URL; the client parses the repo id back out of it, so the type prefix matters."""
    prefix = "" if repo_type == "model" else f"{repo_type}s/"
    return f"{base_url}/{prefix}{repo_id}"


def sibling_json(path: str, entry: FileEntry, blobs: bool) -> dict[str, Any]:
    if not blobs:
        return {"rfilename": path}
    data: dict[str, Any] = {"rfilename": path, "size": entry.size, "blobId": entry.oid}
    if entry.lfs:
        data["lfs"] = {"sha256": entry.sha256, "size": entry.size, "pointerSize": entry.pointer_size}
    return data


def repo_info_json(repo: Repo, commit: Commit, metadata: CommitMetadata, *, blobs: bool = False) -> dict[str, Any]:
    """model_info / dataset_info / space_info at one commit (`sha` and `lastModified` describe that commit)."""
    data: dict[str, Any] = {
        "_id": hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}".encode()).hexdigest()[:24],
        "id": repo.repo_id,
        "author": repo.namespace,
        "sha": commit.id,
        "lastModified": commit.date,
        "createdAt": repo.created_at,
        "private": repo.private,
        "gated": repo.gated,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "trendingScore": 0,
        "tags": list(metadata.tags),
        "siblings": [sibling_json(path, entry, blobs) for path, entry in sorted(commit.files.items())],
        "usedStorage": sum(entry.size for entry in commit.files.values()),
        "downloadsAllTime": 0,
    }
    if metadata.card_data is not None:
        data["cardData"] = metadata.card_data
        if "model-index" in metadata.card_data and repo.repo_type == "model":
            data["model-index"] = metadata.card_data["model-index"]
    if repo.repo_type == "model":
        data["modelId"] = repo.repo_id
        if metadata.library_name:
            data["library_name"] = metadata.library_name
        if metadata.pipeline_tag:
            data["pipeline_tag"] = metadata.pipeline_tag
        if metadata.config is not None:
            data["config"] = metadata.config
    if repo.repo_type == "space":
        data["sdk"] = repo.sdk
    return data


def check_expand(expand: list[str], repo_type: str, *, listing: bool) -> None:
    """Refuse `expand` values the Hub does not know, as it does (400; huggingface_hub's tests/test_hf_api.py
    `test_list_models_expand_unexpected_value`). The values are huggingface_hub 1.21.0's `Expand*Property_T`;
    listings refuse `baseModels`, `childrenModelCount` and `usedStorage` (huggingface_hub PR #3182).

    Raises:
        HubError: 400 naming the first unknown value.
    """
    allowed = EXPAND_FIELDS[repo_type] - (_INFO_ONLY_EXPAND if listing else frozenset())
    for index, value in enumerate(expand):
        if value not in allowed:
            raise errors.bad_request(f'"expand[{index}]" must be one of [{", ".join(sorted(allowed))}]')


def expanded(info: dict[str, Any], expand: list[str]) -> dict[str, Any]:
    """What an `expand` query returns: `_id`, `id` and only the fields asked for (huggingface_hub issue #2325:
    "only the mongo id + the repo id + the expand values are returned"), so `sha` is absent unless asked for."""
    item = {"_id": info["_id"], "id": info["id"]}
    item.update({name: info[name] for name in expand if name in info})
    return item


def listing_item(info: dict[str, Any], repo_type: str, *, expand: list[str]) -> dict[str, Any]:
    """Cut a full info dict down to what a listing returns: the default fields, or `id` and those `expand` names."""
    default = {name: info[name] for name in _LIST_FIELDS[repo_type] if name in info}
    item = expanded(info, expand) if expand else default
    if "siblings" in item:
        item["siblings"] = [{"rfilename": sibling["rfilename"]} for sibling in item["siblings"]]
    return item


def file_json(path: str, entry: FileEntry) -> dict[str, Any]:
    data: dict[str, Any] = {"type": "file", "oid": entry.oid, "size": entry.size, "path": path}
    if entry.lfs:
        data["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": entry.pointer_size}
    return data


def folder_json(path: str, files: dict[str, FileEntry]) -> dict[str, Any]:
    prefix = path + "/"
    children = [(name[len(prefix) :], entry.oid) for name, entry in files.items() if name.startswith(prefix)]
    return {"type": "directory", "oid": tree_sha1(children), "size": 0, "path": path}


def folders_of(paths: Iterable[str]) -> set[str]:
    """Every folder that holds at least one of `paths`, at any depth."""
    folders: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        folders.update("/".join(parts[: depth + 1]) for depth in range(len(parts)))
    return folders


def tree_json(commit: Commit, folder: str, recursive: bool) -> list[dict[str, Any]] | None:
    """Entries under `folder` ("" for the root), sorted by path; None when `folder` is not a folder."""
    files = dict(commit.files)
    prefix = folder + "/" if folder else ""
    below = {path: entry for path, entry in files.items() if path.startswith(prefix)}
    if folder and not below:
        return None
    entries = []
    for path, entry in below.items():
        if recursive or "/" not in path[len(prefix) :]:
            entries.append(file_json(path, entry))
    for sub in folders_of(path[len(prefix) :] for path in below):
        if recursive or "/" not in sub:
            entries.append(folder_json(prefix + sub, files))
    return sorted(entries, key=lambda item: item["path"])


def commit_json(commit: Commit) -> dict[str, Any]:
    return {
        "id": commit.id,
        "title": commit.title,
        "message": commit.message,
        "date": commit.date,
        "authors": [{"user": commit.author}],
    }


def refs_json(repo: Repo) -> dict[str, Any]:
    return {
        "branches": [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": target}
            for name, target in sorted(repo.branches.items())
        ],
        "tags": [
            {"name": name, "ref": f"refs/tags/{name}", "targetCommit": target}
            for name, target in sorted(repo.tags.items())
        ],
        "converts": [],
    }
