"""Which optional part of the install a command needs, and a clear error when it is missing.

A gateway in front of vLLM or a streams worker installs ``forge-rl`` alone; the trainer adds
``forge-rl[trainer]`` (DeepSpeed), the picture report ``forge-rl[plots]`` (matplotlib).
``scripts/setup.sh`` installs every extra.
"""

from __future__ import annotations

import importlib.util

from schemas.errors import ForgeError

EXTRA_OF_MODULE = {"deepspeed": "trainer", "matplotlib": "plots"}


def require_extra(module: str, needed_for: str) -> None:
    """Raise a ForgeError naming the extra to install unless ``module`` can be imported."""
    if importlib.util.find_spec(module) is None:
        extra = EXTRA_OF_MODULE[module]
        raise ForgeError(
            f"{needed_for} needs {module}, which this install lacks: "
            f"pip install 'forge-rl[{extra}]' (scripts/setup.sh installs every extra)"
        )
