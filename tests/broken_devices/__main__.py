"""`python -m broken_devices --device BROKEN_ALIAS [...]`: `python -m lazy.conformance` with the broken devices that
`--device`/`--devices` name registered (run with tests/ on PYTHONPATH)."""

from __future__ import annotations

import argparse
import sys

from broken_devices import FIXTURES, PLUGIN_NAME, BrokenDevices
from lazy.conformance.__main__ import main
from lazy.plugins import Device

if __name__ == "__main__":
    named = argparse.ArgumentParser(add_help=False)
    named.add_argument("--device", default="")
    named.add_argument("--devices", default="")
    args, _ = named.parse_known_args()
    devices = [name.strip().partition(":")[0].upper() for name in f"{args.device},{args.devices}".split(",")]
    Device.register(BrokenDevices([name for name in devices if name in FIXTURES]), PLUGIN_NAME)
    sys.exit(main())
