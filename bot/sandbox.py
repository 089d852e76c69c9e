"""Entry point of every child process that loads checkpoint files (`python -m bot.sandbox TOOL ARGS...`).

It checks, from inside the process that will read the untrusted files, that no Hub credential is reachable (no
secret-looking environment variable, no token file in its HF_HOME) and refuses to run otherwise, so the trust
boundary of DESIGN §3 is asserted where it matters rather than assumed from the parent's intentions.
"""

from __future__ import annotations

import os
import sys

from bot.isolation import SECRET_NAME

REFUSED = 70  # EX_SOFTWARE: the parent built a wrong environment


def visible_credentials(env: dict[str, str] | None = None) -> list[str]:
    """Names of credentials this process could use: secret-looking variables and a stored Hub token."""
    env = dict(os.environ) if env is None else env
    found = sorted(name for name in env if SECRET_NAME.search(name))
    from huggingface_hub import get_token

    if get_token() is not None:
        found.append("huggingface_hub.get_token()")
    return found


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m bot.sandbox {optimum-cli|validate|quality} ARGS...", file=sys.stderr)
        return 2
    leaked = visible_credentials()
    if leaked:
        print(f"sandbox: refusing to load checkpoints with credentials in reach: {', '.join(leaked)}",
              file=sys.stderr)
        return REFUSED
    print("sandbox: no Hub token in this process", flush=True)
    tool, args = argv[0], argv[1:]
    if tool == "optimum-cli":
        from optimum.commands.optimum_cli import main as optimum_main

        sys.argv = ["optimum-cli", *args]
        return optimum_main() or 0
    if tool == "validate":
        from bot.validate import main as validate_main

        return validate_main(args)
    if tool == "quality":
        from bot.quality import main as quality_main

        return quality_main(args)
    print(f"sandbox: unknown tool {tool}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
