"""`python -m bot.cli ...`: the same entry point as the `dflash-bot` console script."""

import sys

from bot.cli import main

sys.exit(main())
