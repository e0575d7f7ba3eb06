"""Optional dependencies: import them where a feature needs them, or say which extra to install.

``matplotlib`` (heat maps, recall plots) is the ``plot`` extra and ``networkx`` (graph
export) the ``graph`` extra; ``pip install 'relevance-memory[plot,graph]'`` brings both.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]

EXTRAS: dict[str, str] = {"matplotlib": "plot", "networkx": "graph", "langchain_core": "langchain", "agents": "agents"}
"""Top-level module → the extra of ``pyproject.toml`` that installs it."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra to install.

    Attributes:
        module: the missing module (``matplotlib`` …).
        extra: the extra that installs it (``plot`` …).
    """

    def __init__(self, module: str, extra: str, feature: str) -> None:
        self.module = module
        self.extra = extra
        super().__init__(f"{feature} needs {module}, which is not installed: pip install 'relevance-memory[{extra}]'")


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (e.g. ``"matplotlib.pyplot"``) for ``feature`` (e.g. ``"relmem heatmap"``).

    Raises:
        MissingExtraError: the module is not installed (names the extra that installs it).
    """
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise  # the module exists but something it imports is missing: not ours to explain
        raise MissingExtraError(top, EXTRAS.get(top, top), feature) from exc
