"""No telemetry from any process of the bot (docs/design.md §3: nothing connects anywhere but the configured Hub).

One place for every library's own switch, as its installed source reads it:
- huggingface_hub (transformers, diffusers and optimum use its constants): `HF_HUB_DISABLE_TELEMETRY`, also
  `DO_NOT_TRACK`, read once when it is imported. Left on, it fetches an "agent harness" registry from its
  import-time endpoint (huggingface.co, whatever endpoint the bot uses) to fill in the user agent: the DNS query
  the offline demo made. `HF_HUB_OFFLINE` stops it too, but only the sandboxed children may be offline.
- NNCF: `NNCF_CI` makes its telemetry a stub (`nncf/telemetry/wrapper.py`), though only after it has built the
  real OpenVINO telemetry object on import.
- OpenVINO (`openvino_telemetry`, used by NNCF and by ovc, i.e. `openvino.convert_model`): no switch of its own
  but "running in CI" (`CI=true`, which also changes how transformers and torch behave). Consent lives in
  `$HOME/intel/openvino_telemetry` ("0" declines); with no file NNCF and ovc send, write a client id and a usage
  counter there, and post each event from a forked copy of the process that they SIGTERM after a timeout.
  NNCF and ovc both fall back to a stub when it cannot be imported. So a sandboxed child, which has a HOME of its
  own, gets a declined consent file there (`bot.sandbox.child.decline_telemetry`), and the bot's own processes make the
  package unimportable before anything loads NNCF or ovc (`switch_off`): no event, no fork, nothing in any home.
- optimum, optimum-intel, transformers: nothing of their own beyond huggingface_hub's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import MappingProxyType

SWITCHES: Mapping[str, str] = MappingProxyType(
    {
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "NNCF_CI": "1",
    }
)
OPENVINO_TELEMETRY = "openvino_telemetry"


def off_env(base: Mapping[str, str]) -> dict[str, str]:
    """`base` with every switch above set (for a process the bot starts)."""
    return {**base, **SWITCHES}


def switch_off() -> bool:
    """Telemetry off for this process and everything it starts; call it before anything imports a library.

    Returns:
        True when OpenVINO's telemetry was still unloaded and is now unimportable here (NNCF and ovc take their
        stubs); False when something imported it first (the environment switches still apply to children).
    """
    os.environ.update(SWITCHES)
    if OPENVINO_TELEMETRY in sys.modules:
        return sys.modules[OPENVINO_TELEMETRY] is None
    sys.modules[OPENVINO_TELEMETRY] = None  # type: ignore[assignment]  # `import` now raises ImportError
    return True
