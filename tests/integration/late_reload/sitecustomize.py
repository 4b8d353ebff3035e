"""Fault injection for ``test_admission_staleness``: an engine that serves new policies late.

On ``PYTHONPATH`` in the run's environment, Python imports this at start in every process of
the run; when the gateway imports ``gateway.engines.embedded_engine``, reading a new policy's
weights is made to take ``FORGE_TEST_RELOAD_DELAY_S`` seconds longer, as a vLLM reload does at real
sizes. The engine keeps serving the old policy meanwhile.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Sequence
from types import ModuleType

TARGET = "gateway.engines.embedded_engine"
DELAY_S = float(os.environ.get("FORGE_TEST_RELOAD_DELAY_S", "0"))


class LateReloadFinder(importlib.abc.MetaPathFinder):
    """Finds the engine module as usual, and slows its weight reader once it has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_then_slow(module: ModuleType) -> None:
            execute(module)
            read = module._read_weights

            def read_late(*args: object) -> object:
                time.sleep(DELAY_S)
                return read(*args)

            module._read_weights = read_late

        loader.exec_module = exec_then_slow  # type: ignore[method-assign]
        return spec


if DELAY_S > 0:
    sys.meta_path.insert(0, LateReloadFinder())
