"""`python -m hubserver`: serve a local Hub in the foreground (what `start_subprocess` runs).

The token comes from `--token` or, so that it does not show in the process list, from $LOCAL_HUB_TOKEN.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .faults import load_rules
from .server import TOKEN_ENV, serve


def configure_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hubserver", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one")
    parser.add_argument("--data", type=Path, required=True, help="folder where repos persist")
    parser.add_argument("--user", required=True, help="user of the main token (may write anywhere)")
    parser.add_argument("--token", default=None, help=f"main token (default: ${TOKEN_ENV})")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--page-size", type=int, default=1000, help="entries per listing page")
    parser.add_argument("--faults", type=Path, default=None, help="JSON file with fault rules")
    parser.add_argument(
        "--org", action="append", default=[], help="an organisation the main user is an admin of (repeatable)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = configure_parser().parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        print(f"error: pass --token or set ${TOKEN_ENV}", file=sys.stderr)
        return 2
    try:
        faults = load_rules(args.faults) if args.faults else []
    except (OSError, ValueError) as exc:
        print(f"error: cannot load fault rules from {args.faults}: {exc}", file=sys.stderr)
        return 2
    try:
        serve(
            args.port,
            args.data,
            args.user,
            token,
            host=args.host,
            page_size=args.page_size,
            faults=faults,
            orgs=args.org,
        )
    except (RuntimeError, OSError) as exc:  # data folder already served, port taken
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
