"""Writes (the publish stage's token only): the card check, one commit per repo guarded by its parent, tags.

Every commit names the commit its caller read as its parent (`parent_commit`), so a writer that committed since
makes it fail with 412 (`PreconditionFailed`) instead of interleaving; the uploads of one client share one deadline
(`HubSettings.upload_deadline_s`, `Transport.uploads`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub as hf

from bot.core.errors import Failure, HubError, PreconditionFailed, Stage
from bot.core.hub_records import RepoFiles
from bot.hub.reads import Reads


@dataclass(frozen=True)
class CommitResult:
    repo_id: str
    commit: str | None  # None when nothing changed
    url: str
    files: tuple[str, ...]


class Writes(Reads):
    """The Hub's write operations; a publish reads the repo it writes first (`Reads.repo_files`)."""

    def validate_card(self, text: str, *, repo_id: str, repo_type: str = "model") -> None:
        """Ask this Hub whether it accepts a card's metadata (`POST /api/validate-yaml`), before anything uploads.

        huggingface_hub 1.21.0's `RepoCard.validate` posts to a hard-coded huggingface.co, so this uses the check
        its `create_commit` makes for a README.md (`HfApi._validate_yaml`), which honours the configured endpoint.

        Raises:
            Failure: the Hub refuses the metadata; the message names each refused field as the Hub does
                (e.g. `"license" must be one of [...]`), and nothing has been uploaded.
            HubError: the Hub could not be asked (after the usual retries).
        """

        def check() -> None:
            try:
                self.api._validate_yaml(text, repo_type=repo_type)
            except json.JSONDecodeError:  # the client reads the body before the status: not the Hub's answer
                raise HubError(
                    "the Hub's answer to the card check (validate-yaml) is not JSON: a proxy's or CDN's answer",
                    status=None,
                    subject=repo_id,
                    stage=Stage.PUBLISH,
                ) from None
            except ValueError as exc:
                reasons = " ".join(line.lstrip("- ") for line in str(exc).splitlines()[1:] if line.strip())
                raise Failure(
                    f"the Hub refuses the card's metadata: {reasons or exc}", subject=repo_id, stage=Stage.PUBLISH
                ) from None

        self.call(Stage.PUBLISH, check, subject=repo_id)

    def publish_folder(
        self,
        repo_id: str,
        folder: Path,
        *,
        message: str,
        private: bool,
        delete_stale: bool = True,
        only: Iterable[str] | None = None,
        seen: RepoFiles | None,
    ) -> CommitResult:
        """Create the repo if needed and commit the folder in ONE commit, guarded by `parent_commit`.

        Unchanged files are skipped by the client (their oids match), stale files are deleted in the same
        commit, and a concurrent writer makes the commit fail with 412 instead of interleaving.

        Args:
            seen: the repo as the caller read it when it decided to publish (`files_or_none`): its commit is the
                parent, so a writer that committed since makes this one fail with 412 (`PreconditionFailed`) rather
                than land on top of work the caller never saw. None: the caller saw no repo; a repo that holds files
                by now is refused the same way.
        """
        self.call(
            Stage.CREATE_REPO, lambda: self.api.create_repo(repo_id, private=private, exist_ok=True), subject=repo_id
        )
        head = seen if seen is not None else self.repo_files(repo_id)
        if seen is None and set(head.sizes) - {".gitattributes"}:
            raise PreconditionFailed(
                "another writer published to the repo since it was found empty",
                status=412,
                subject=repo_id,
                stage=Stage.COMMIT,
            )
        names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if only is not None:
            names = [n for n in names if n in set(only)]
        operations: list = [hf.CommitOperationAdd(path_in_repo=n, path_or_fileobj=str(folder / n)) for n in names]
        if delete_stale and only is None:
            keep = set(names) | {".gitattributes"}
            operations += [hf.CommitOperationDelete(path_in_repo=n) for n in sorted(head.sizes) if n not in keep]

        def commit() -> CommitResult:
            info = self.api.create_commit(repo_id, operations, commit_message=message, parent_commit=head.sha)
            changed = info.oid != head.sha
            return CommitResult(
                repo_id=repo_id,
                commit=info.oid if changed else None,
                url=f"{self.endpoint}/{repo_id}",
                files=tuple(names),
            )

        with self.uploads.applied():
            return self.call(Stage.COMMIT, commit, subject=repo_id)

    def tag(self, repo_id: str, tag: str, revision: str | None = None) -> None:
        self.call(
            Stage.TAG, lambda: self.api.create_tag(repo_id, tag=tag, revision=revision, exist_ok=True), subject=repo_id
        )

    def commit_files(
        self, repo_id: str, files: dict[str, bytes], *, message: str, repo_type: str = "dataset", private: bool = False
    ) -> CommitResult:
        """Create the repo if needed and commit these files in ONE commit guarded by `parent_commit`.

        Files whose bytes equal the Hub's are left out by the client; when none differ there is no commit
        (`CommitResult.commit` is None).
        """
        self.call(
            Stage.CREATE_REPO,
            lambda: self.api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True),
            subject=repo_id,
        )
        head = self.call(Stage.INFO, lambda: self.api.repo_info(repo_id, repo_type=repo_type).sha, subject=repo_id)
        operations = [
            hf.CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in sorted(files.items())
        ]

        def commit() -> CommitResult:
            info = self.api.create_commit(
                repo_id, operations, commit_message=message, parent_commit=head, repo_type=repo_type
            )
            prefix = "" if repo_type == "model" else f"{repo_type}s/"
            return CommitResult(
                repo_id=repo_id,
                commit=info.oid if info.oid != head else None,
                url=f"{self.endpoint}/{prefix}{repo_id}",
                files=tuple(sorted(files)),
            )

        with self.uploads.applied():
            return self.call(Stage.COMMIT, commit, subject=repo_id)
