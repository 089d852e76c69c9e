"""Time `dflash-bot build` against the plain sequence a user would type, on the same tiny pair, in one run.

Plain: optimum-cli for the target, optimum-cli for the draft, a minimal GenAI lossless script (3 prompts, one k).
Bot: the same exports (in parallel, in a token-free child environment), the IR checks, the lossless gate for
every k of the recipe's sweep, the acceptance gate and the speed sweep, and a clean bundle.
Prints the ratio bot/plain (goal: <= 1.0).

    .venv/bin/python bench/build_overhead.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, bot_env, plain_pair, print_json, timed
from tinymodels import make_tiny


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = Path(tmp)
        pair = make_tiny("dflash", work / "pair")
        bot, plain = [], []
        for round_ in range(args.rounds):
            round_dir = work / f"round-{round_}"
            (round_dir / "plain").mkdir(parents=True)
            plain.append(plain_pair(pair.target, pair.draft, round_dir / "plain"))
            bot.append(
                timed(
                    [
                        str(BIN / "dflash-bot"),
                        "build",
                        "--draft",
                        str(pair.draft),
                        "--target",
                        str(pair.target),
                        "--out",
                        str(round_dir / "bundle"),
                    ],
                    env=bot_env(),
                )
            )
            print(f"round {round_ + 1}: bot {bot[-1]:.1f}s, plain {plain[-1]:.1f}s", flush=True)
    bot_s, plain_s = statistics.median(bot), statistics.median(plain)
    print_json(
        {
            "pair": "tiny dflash (Qwen3 H128 x4 layers + 1-layer DFlash draft)",
            "rounds": args.rounds,
            "bot_build_s": round(bot_s, 1),
            "plain_sequence_s": round(plain_s, 1),
            "ratio_bot_over_plain": round(bot_s / plain_s, 3),
            "goal": "<= 1.0",
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
