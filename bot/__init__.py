"""dflash-bot: DFlash/DSpark drafts on the Hub to validated OpenVINO int4 repos.

One folder per stage, in layers; a module imports only from its own folder and from the layers before it, lowest
first:

    core → hub → sandbox → discover → plan → builder → publish → status → run → cli

- `core/`: the facts every stage shares: the build record, outcomes, errors, settings, recipes, naming, the log.
- `hub/`: the one package that talks to the Hub (one client, `hub.client.Hub`).
- `sandbox/`: the child processes that load untrusted checkpoints and IRs, and what confines them.
- `discover/`: the candidate drafts on the Hub, what each checkpoint is, and safe working copies of them.
- `plan/`: what to build (or reuse) from what is already published, and whether it fits a runner.
- `builder/`: export, IR checks, quality, GenAI validation, and the bundle with its record.
- `publish/`: commits, cards, charts and the collection.
- `status/`: the status repo: the bot's memory between runs and its public page.
- `run/`: the orchestration (`dflash-bot run`, the Actions fan-out, the demo) and the run report.
- `cli/`: the typed command line over `run/`, one module per command group.

`tests/test_layout.py` holds the code to these rules: no upward import, no import circle, and an import inside a
function only for a heavy library (torch, OpenVINO, GenAI, matplotlib, ...), with its reason beside it.
"""

__version__ = "0.1.0"
