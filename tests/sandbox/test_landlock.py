"""`bot.sandbox.landlock`: the kernel's ABI version is a non-negative int, and a process that restricts itself to
folders can read and write there but cannot open a file outside them, nor undo it (checked in subprocesses: the
confinement cannot be lifted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.sandbox.landlock import LandlockError, abi_version

ABI = abi_version()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="Landlock is not enabled in this kernel")

_CONFINED = """
import json, sys
from pathlib import Path
from bot.sandbox.landlock import restrict
allowed, outside, work = map(Path, sys.argv[1:4])
abi = restrict([allowed, *map(Path, sys.argv[4:])], [work])
result = {"abi": abi}
result["read_allowed"] = (allowed / "in.txt").read_text()
(work / "new.txt").write_text("written")
result["wrote_work"] = (work / "new.txt").read_text()
for name, action in (("read_outside", lambda: (outside / "secret.txt").read_text()),
                     ("write_allowed", lambda: (allowed / "planted.txt").write_text("x")),
                     ("write_outside", lambda: (outside / "planted.txt").write_text("x"))):
    try:
        action()
        result[name] = "ok"
    except OSError as exc:
        result[name] = type(exc).__name__
print(json.dumps(result))
"""


def test_abi_version_is_a_non_negative_int() -> None:
    assert isinstance(ABI, int)
    assert ABI >= 0
    assert abi_version() == ABI


def test_landlock_error_is_an_os_error() -> None:
    assert issubclass(LandlockError, OSError)


@needs_landlock
def test_restrict_confines_files_to_the_given_folders(tmp_path: Path) -> None:
    allowed, outside, work = tmp_path / "allowed", tmp_path / "outside", tmp_path / "work"
    for folder in (allowed, outside, work):
        folder.mkdir()
    (allowed / "in.txt").write_text("readable")
    (outside / "secret.txt").write_text("secret")
    # The interpreter and its libraries stay readable (a later import may need them); tmp_path is not among them.
    system = [sys.prefix, sys.base_prefix, "/usr", "/lib", "/lib64"]
    result = subprocess.run(
        [sys.executable, "-c", _CONFINED, str(allowed), str(outside), str(work), *system],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["abi"] == ABI
    assert seen["read_allowed"] == "readable"
    assert seen["wrote_work"] == "written"
    assert seen["read_outside"] == "PermissionError"
    assert seen["write_allowed"] == "PermissionError"  # read-only folder
    assert seen["write_outside"] == "PermissionError"
    assert (outside / "secret.txt").read_text() == "secret" and not (outside / "planted.txt").exists()


@needs_landlock
def test_restrict_skips_missing_paths(tmp_path: Path) -> None:
    script = (
        "import sys\nfrom pathlib import Path\nfrom bot.sandbox.landlock import restrict\n"
        f"print(restrict([Path({str(tmp_path / 'missing')!r}), *map(Path, sys.path[1:]), Path('/usr')], []))\n"
        f"open({str(tmp_path / 'x')!r}, 'w')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert result.stdout.strip() == str(ABI)
    assert result.returncode != 0 and "PermissionError" in result.stderr
