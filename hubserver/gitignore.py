"""`.gitignore` matching for preupload's `shouldIgnore`: the Hub applies the repo's `.gitignore` (or the one the
client sends as `gitIgnore`, or the one being committed) and the client then leaves ignored files out of the commit
(huggingface_hub `_commit_api._fetch_upload_modes` reads `shouldIgnore`; `create_commit` logs "Skipped N file(s) in
commit (ignored by gitignore file)").

Covers git's rules that matter for file paths: comments, blank lines, `!` negation (last match wins), a trailing `/`
(the pattern names a folder, so everything under it), a leading or inner `/` (anchored at the root, else the pattern
matches at any depth), `*`, `?`, `[...]` and `**`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    folder_only: bool


def _translate(pattern: str) -> str:
    """A gitignore glob (without its anchoring) as a regex over a `/`-separated path."""
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
            continue
        if pattern.startswith("/**", index) and index + 3 == len(pattern):
            out.append("/.*")
            index += 3
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", index + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1 : end].replace("\\", "\\\\")
                out.append(f"[{'^' + body[1:] if body.startswith('!') else body}]")
                index = end
        elif char == "\\" and index + 1 < len(pattern):
            index += 1
            out.append(re.escape(pattern[index]))
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def parse(text: str) -> list[_Rule]:
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        folder_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        body = _translate(line.lstrip("/"))
        prefix = "^" if anchored else "^(?:.*/)?"
        rules.append(_Rule(re.compile(f"{prefix}{body}$"), negated, folder_only))
    return rules


def is_ignored(path: str, rules: list[_Rule]) -> bool:
    """Whether `path` (a file) is ignored: a rule matches the file itself or one of its folders; the last match wins.

    As in git, a file inside an ignored folder stays ignored even if a later rule negates the file itself.
    """
    parts = path.split("/")
    for depth in range(1, len(parts)):
        if _verdict("/".join(parts[:depth]), rules, is_folder=True):
            return True
    return _verdict(path, rules, is_folder=False)


def _verdict(path: str, rules: list[_Rule], *, is_folder: bool) -> bool:
    ignored = False
    for rule in rules:
        if rule.folder_only and not is_folder:
            continue
        if rule.regex.match(path):
            ignored = not rule.negated
    return ignored
