"""`.gitignore` matching for preupload's `shouldIgnore`: the Hub applies the repo's `.gitignore` (or the one the
client sends as `gitIgnore`, or the one being committed) and the client then leaves ignored files out of the commit
(huggingface_hub `_commit_api._fetch_upload_modes` reads `shouldIgnore`; `create_commit` logs "Skipped N file(s) in
commit (ignored by gitignore file)").

git's own rules (comments, `!` negation with the last match winning, a trailing `/` for folders, anchoring by a
leading or inner `/`, `*`, `?`, `[...]`, `**`, and a file inside an ignored folder staying ignored) come from
`pathspec`'s `GitIgnoreSpec`, which implements them as git does.
"""

from __future__ import annotations

from pathspec import GitIgnoreSpec


def parse(text: str) -> GitIgnoreSpec:
    """The rules of one `.gitignore` file."""
    return GitIgnoreSpec.from_lines(text.splitlines())


def is_ignored(path: str, rules: GitIgnoreSpec) -> bool:
    """Whether `path` (a file, `/`-separated from the repo's root) is ignored by `rules`."""
    return rules.match_file(path)
