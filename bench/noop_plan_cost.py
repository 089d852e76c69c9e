"""What the plan job of a scheduled run with nothing new costs: install + plan, seconds (issue 30, deliverable 5).

The Actions plan job installs the bot without the export toolchain (`make install-light`: `pip install -e
'.[publish]'`) from a warm pip cache, then runs `dflash-bot plan --matrix --out plan.json`. This bench does the same
in a fresh virtual environment, with pip's own configuration (here: the machine's local package indexes and wheel
folder; on Actions: PyPI through setup-python's pip cache), against a local Hub seeded as a no-op: N hand-made
published drafts that the status repo remembers (`bench/noop_seed.py`). For comparison it times the full toolchain
install (`make install`: CPU torch, then `.[build,dev]`, then torchvision removed) in a second fresh environment.
Goal: install + plan <= 60 s. Subprocesses run under `nice`, one at a time. The plan runs in the light environment
and, for comparison (or when the light one fails), in this process's full `.venv` against the same Hub.

    .venv/bin/python bench/noop_plan_cost.py               # light install + plan, then the full install
    .venv/bin/python bench/noop_plan_cost.py --no-full     # light install + plan only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import print_json  # noqa: E402

NICE = ["nice", "-n", "10"]


class Failed(Exception):
    """A command that exited non-zero: its last line."""


def _timed(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 600) -> float:
    """Seconds `cmd` took (it must succeed); its output is kept back unless it fails."""
    started = time.perf_counter()
    done = subprocess.run([*NICE, *cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        raise Failed(f"exit {done.returncode}: {lines[-1] if lines else ''}")
    return seconds


def _venv(folder: Path) -> tuple[Path, float]:
    seconds = _timed([sys.executable, "-m", "venv", str(folder)])
    return folder / "bin", seconds


def light(work: Path, published: int) -> dict:
    """Fresh venv, `make install-light`'s pip line, then the plan job's command against a no-op local Hub."""
    from bench.noop_seed import seed_published
    from bot.core.recipe import load_recipe
    from bot.hub.client import Hub
    from bot.hub.transport import configure_client
    from hubserver import LocalHub

    bin_dir, venv_s = _venv(work / "light")
    install_s = _timed([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "-e", ".[publish]"])
    recipe = load_recipe()
    with LocalHub(work / "hub", user="bot", token="hf_w") as server:
        configure_client(server.url)
        seed_published(Hub(server.url, "hf_w"), recipe, work / "seed", published)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GITHUB_"))}
        env |= {"HF_ENDPOINT": server.url, "HF_READ_TOKEN": "hf_w", "HF_HUB_DISABLE_XET": "1"}
        out = work / "plan.json"
        plan_in = {"light": bin_dir, "full (this .venv)": Path(sys.executable).parent}
        plans: dict[str, dict] = {}
        for name, where in plan_in.items():
            out.unlink(missing_ok=True)
            try:
                seconds = _timed([str(where / "dflash-bot"), "plan", "--matrix", "--out", str(out)], env=env)
            except Failed as failed:
                plans[name] = {"failed": str(failed)}
                continue
            planned = json.loads(out.read_text())
            statuses = [o["status"] for o in planned["report"]["outcomes"]]
            plans[name] = {
                "plan_s": round(seconds, 1),
                "matrix_entries": len(planned["entries"]),
                "outcomes": {status: statuses.count(status) for status in sorted(set(statuses))},
            }
    plan_s = next((p["plan_s"] for p in plans.values() if "plan_s" in p), None)
    total = venv_s + install_s + plan_s if plan_s is not None else None
    return {
        "published_drafts": published,
        "venv_s": round(venv_s, 1),
        "install_light_s": round(install_s, 1),
        "light_venv_mb": _size_mb(work / "light"),
        "plan": plans,
        "install_plus_plan_s": round(total, 1) if total is not None else None,
        "goal_60_s": total is not None and total <= 60,
    }


def full(work: Path) -> dict:
    """Fresh venv, the Makefile's `make install` lines (the build job's install)."""
    bin_dir, venv_s = _venv(work / "full")
    pip = [str(bin_dir / "python"), "-m", "pip"]
    seconds = _timed([*pip, "install", "--quiet", "torch==2.13.0"])
    seconds += _timed([*pip, "install", "--quiet", "-e", ".[build,dev]"])
    seconds += _timed([*pip, "uninstall", "--quiet", "-y", "torchvision"])
    return {"venv_s": round(venv_s, 1), "install_full_s": round(seconds, 1), "full_venv_mb": _size_mb(work / "full")}


def _size_mb(folder: Path) -> int:
    return round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--published", type=int, default=10, help="hand-made published drafts the memory holds")
    parser.add_argument("--no-full", action="store_true", help="skip the full toolchain install")
    args = parser.parse_args()
    index = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    results: dict = {"pip_config": index.strip().splitlines()}
    with tempfile.TemporaryDirectory(prefix="bench-plan-cost-") as tmp:
        results["light"] = light(Path(tmp), args.published)
        if not args.no_full:
            results["full"] = full(Path(tmp))
    print_json(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
