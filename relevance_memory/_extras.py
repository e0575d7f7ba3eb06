"""Optional dependencies: import them where a feature needs them, or say which extra to install.

``matplotlib`` (heat maps, recall plots) is the ``plot`` extra and ``networkx`` (graph
export) the ``graph`` extra; ``pip install 'relevance-memory[plot,graph]'`` brings both.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._exceptions import MissingExtraError

__all__ = ["MissingExtraError", "require"]

EXTRAS: dict[str, str] = {"matplotlib": "plot", "networkx": "graph", "langchain_core": "langchain", "agents": "agents"}
"""Top-level module → the extra of ``pyproject.toml`` that installs it."""


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
