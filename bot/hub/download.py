"""Downloads: exactly the files discovery chose, of one revision, each checked against the Hub's hash for it.

A transfer that stalls resumes where it stopped, under the download deadline; a file whose bytes do not match what
the Hub lists (LFS sha256, else the git blob id; docs/design.md §3) is fetched once more, then fails. Nothing past
the size the Hub lists for a file is ever written, and a full disk is the runner's fault, said in one line.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import httpx
import huggingface_hub as hf

from bot.core import deadlines, log
from bot.core.errors import BotError, Failure, HubError, InfrastructureFailure, RunnerFault, Stage
from bot.core.hashes import FileHash, HubHash, hash_file, is_blob_id, is_sha256, mismatch, write_manifest
from bot.hub.transport import Transport, one_line


@dataclass(frozen=True)
class Download:
    """One revision's files in a plain folder, each checked against the Hub's hash: their sha256 and size."""

    path: Path
    repo_id: str
    revision: str
    files: dict[str, FileHash]


class Downloads(Transport):
    """Hash-checked, resumable downloads of one revision's files into a plain folder."""

    def listed_hashes(self, repo_id: str, revision: str) -> dict[str, HubHash]:
        """The hash the Hub lists for every file of a repo at one revision (one request)."""
        return self.call(Stage.INFO, lambda: self._listed_hashes(repo_id, revision), subject=repo_id)[1]

    def download(self, repo_id: str, revision: str, dest: Path, files: Iterable[str]) -> Download:
        """Download exactly `files` of one revision into a plain folder, each checked against the Hub's hash.

        The names are the ones discovery selected and sized: nothing else is fetched, whatever the repo holds. Each
        file must match what the Hub lists for that revision (LFS sha256, else the git blob id; docs/design.md §3): a
        Hub, proxy or CDN that served other bytes costs one fresh download of that file, a second mismatch fails it.
        A transfer that stalls resumes where it stopped (`HubSettings.download_attempts`), all under the download
        deadline. The verified sha256 and size of every file are returned and written beside the folder
        (`bot.core.hashes.read_manifest`), never into it.

        Raises:
            Skip: the Hub's own answer says the repo, the revision or a file is not there.
            Failure: a file's bytes did not match the Hub's hash twice, or the Hub lists no hash for it.
            HubError: the Hub kept failing, a transfer stalled every attempt, or the download deadline passed.
        """
        names = sorted(files)
        partials = dest.parent / f".{dest.name}.partial"
        try:
            with self.deadline(Stage.DOWNLOAD, self.settings.download_deadline_s):
                commit, listed = self.call(Stage.INFO, lambda: self._listed_hashes(repo_id, revision), subject=repo_id)
                dest.mkdir(parents=True, exist_ok=True)
                verified = {
                    name: self._download_verified(repo_id, commit, name, listed.get(name), dest, partials)
                    for name in names
                }
        finally:
            shutil.rmtree(partials, ignore_errors=True)
        write_manifest(dest, verified)
        return Download(dest, repo_id, commit, verified)

    def _listed_hashes(self, repo_id: str, revision: str) -> tuple[str, dict[str, HubHash]]:
        """The commit a revision names and the hash the Hub lists for each file there (one request)."""
        info = self.api.model_info(repo_id, revision=revision, files_metadata=True)
        listed = {}
        for sibling in info.siblings or []:
            lfs = sibling.lfs
            sha256 = lfs.sha256 if lfs is not None else None
            listed[sibling.rfilename] = HubHash(
                size=int(lfs.size if lfs is not None else sibling.size or 0),
                sha256=sha256 if is_sha256(sha256) else None,
                blob_id=sibling.blob_id if is_blob_id(sibling.blob_id) else None,
            )
        return str(info.sha or revision), listed

    def _download_verified(
        self, repo_id: str, commit: str, name: str, listed: HubHash | None, dest: Path, partials: Path
    ) -> FileHash:
        """One file, downloaded until its bytes match the Hub's hash (twice at most), then moved into `dest`."""
        where = f"{name} at {commit[:7]}"
        if listed is None or not listed.checkable:
            why = "the Hub does not list it there" if listed is None else "the Hub lists no hash for it"
            raise Failure(f"{where}: {why}, so it cannot be verified", subject=repo_id, stage=Stage.DOWNLOAD)
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or "\\" in name:
            raise Failure(f"{name!r}: not a file name inside the repo", subject=repo_id, stage=Stage.DOWNLOAD)
        part, final = partials / relative, dest / relative
        problem = ""
        for attempt in (1, 2):
            self._transfer(repo_id, commit, name, listed.size, part)
            local = hash_file(part)
            problem = mismatch(local, listed) or ""
            if not problem:
                final.parent.mkdir(parents=True, exist_ok=True)
                part.replace(final)
                return local.file
            part.unlink()
            if attempt == 1:
                log.step("%s: %s: %s; downloading it again", repo_id, where, problem)
        raise Failure(f"{where}: {problem} (downloaded twice; not built)", subject=repo_id, stage=Stage.DOWNLOAD)

    def _transfer(self, repo_id: str, commit: str, name: str, size: int, part: Path) -> None:
        """Fetch one file into `part`, resuming a stalled transfer where it stopped.

        Raises:
            HubError: every attempt stalled, or the download deadline passed, naming the bytes received.
        """
        url = hf.hf_hub_url(repo_id, name, revision=commit, endpoint=self.endpoint)
        headers = self.headers()
        part.parent.mkdir(parents=True, exist_ok=True)
        attempts, cause, label = self.settings.download_attempts, "no attempt", f"{name} at {commit[:7]}"
        for attempt in range(1, attempts + 1):
            try:
                self.call(
                    Stage.DOWNLOAD,
                    lambda: _get_into(url, headers, part, size, label, progress=f"{repo_id}: {name}"),
                    subject=repo_id,
                )
                return
            except BotError as error:  # over the listed size, or the disk is full: no attempt more
                raise error.at(subject=repo_id) from None
            except _Interrupted as stop:
                cause = stop.reason
                if stop.final or attempt == attempts:
                    break
                log.step("%s: %s stopped at %d of %d bytes (%s); resuming", repo_id, name, _size(part), size, cause)
                if not self._wait(attempt, None, Stage.DOWNLOAD):
                    break
        raise HubError(
            f"download of {name} at {commit[:7]} stopped with {_size(part)} of {size} bytes received, after "
            f"{attempt} attempt(s) each resuming where the last stopped: {cause}",
            status=None,
            subject=repo_id,
            stage=Stage.DOWNLOAD,
        )


class _Interrupted(Exception):
    """A transfer stopped part-way (stalled, dropped, past the deadline); `Downloads._transfer` decides whether to
    resume."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.reason = one_line(cause, 200) or type(cause).__name__
        self.final = isinstance(cause, deadlines.DeadlinePassed)


def _get_into(url: str, headers: dict[str, str], part: Path, size: int, where: str, *, progress: str = "") -> None:
    """One GET of a file into `part`, from the byte it already holds; every byte is on disk as soon as it arrives,
    and never one past the `size` the Hub lists for the file, whatever the answer claims or sends. With `progress`
    (the repo and file, never the URL or headers), a line says the bytes so far and the rate every
    `log.PROGRESS_INTERVAL_S` (`log.ByteProgress`).

    `identity`: the bytes on the wire are the file's own (the Hub gzips text files otherwise), so a Range resumes at
    an exact byte and the hash covers the file as stored.

    Raises:
        _Interrupted: the answer stalled, the connection failed, or the deadline passed.
        Failure: the answer claims or sends more than `size` bytes (a CDN or mirror sending another body): stopped
            there, naming the file, the bytes and the limit.
        InfrastructureFailure: the disk is full (one line: the bytes the file still needs and the bytes free).
    """
    offset = _size(part)
    if offset > size:
        part.unlink()
        offset = 0
    elif offset and offset == size:
        return  # complete already; the hash check decides
    request_headers = {**headers, "Accept-Encoding": "identity"}
    if offset:
        request_headers["Range"] = f"bytes={offset}-"
    try:
        with hf.utils.get_session().stream("GET", url, headers=request_headers, follow_redirects=True) as response:
            hf.utils.hf_raise_for_status(response)
            # A server that ignores the Range sends the whole file again (200): start over.
            resumed = bool(offset) and response.status_code == 206
            written = offset if resumed else 0
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and written + int(declared) > size:
                raise _oversized(where, written + int(declared), size, claimed=True)
            shown = log.ByteProgress(progress, size, done=written) if progress else None
            with part.open("ab" if resumed else "wb") as out:
                for chunk in response.iter_bytes():
                    if written + len(chunk) > size:
                        raise _oversized(where, written + len(chunk), size, claimed=False)
                    _write(out, chunk, part, where, needed=size - written)
                    written += len(chunk)
                    if shown is not None:
                        shown.advance(len(chunk))
    except (deadlines.Stalled, deadlines.DeadlinePassed, httpx.TransportError) as exc:
        raise _Interrupted(exc) from None


def _oversized(where: str, got: int, size: int, *, claimed: bool) -> Failure:
    how = f"its answer claims {got} bytes" if claimed else f"its answer ran to {got} bytes"
    return Failure(
        f"download of {where} stopped: {how}, over the {size} bytes the Hub lists for the file (nothing past "
        f"{size} bytes is written; a CDN, proxy or mirror sent another body)",
        stage=Stage.DOWNLOAD,
    )


def _write(out: BinaryIO, chunk: bytes, part: Path, where: str, *, needed: int) -> None:
    """Write one chunk of a download; a full disk is the runner's fault, said in one line."""
    try:
        out.write(chunk)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise disk_full(f"download of {where}", needed, part.parent) from None


def disk_full(what: str, needed: int, folder: Path) -> InfrastructureFailure:
    """The one line a full disk is reported with: what needed the room, the bytes it needed and the bytes free."""
    try:
        free: int | str = shutil.disk_usage(folder).free
    except OSError:
        free = "unknown"
    return InfrastructureFailure(
        f"disk full: {what} needs {needed} more bytes, {free} bytes free on the runner's disk ({folder})",
        runner=RunnerFault.DISK_FULL,
        stage=Stage.DOWNLOAD,
    )


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0
