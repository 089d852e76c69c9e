"""dflash-bot: DFlash/DSpark drafts on the Hub to validated OpenVINO int4 repos."""

__version__ = "0.1.0"
