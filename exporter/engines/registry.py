"""The engines specwatch knows: every ``<engine>_engine.py`` of ``engines/``, defining ``ENGINE``.

Found by looking, not by a list, so an engine is added by adding its module; only those
modules are imported, so finding the engines loads no simulator. Everything that offers a
choice of engine (config, CLI flags and their help, the simulator) or tries each one in turn
(detection, the upstream scraper, fix texts) reads this.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from exporter.engines.engine import Engine, has_any


def _discover() -> tuple[Engine, ...]:
    found: list[Engine] = []
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if not module.name.endswith("_engine"):
            continue
        defined = getattr(importlib.import_module(f"{__package__}.{module.name}"), "ENGINE", None)
        if defined is not None:
            if not isinstance(defined, Engine):
                raise TypeError(f"engines/{module.name}.py: ENGINE is not an Engine")
            found.append(defined)
    return tuple(sorted(found, key=lambda each: each.name))


ENGINES = _discover()
BY_NAME = {engine.name: engine for engine in ENGINES}
NAMES = tuple(BY_NAME)
# Metric-name spellings folded into the ones the engines' upstream readers read, old to new.
NAME_FOLDS = tuple(fold for engine in ENGINES for fold in engine.metric_name_folds.items())
# Bytes that any engine's stats or start-up lines carry: a batch without one decides nothing.
MARKERS = tuple(marker for engine in ENGINES for marker in engine.markers)


def engine(name: str) -> Engine:
    """The engine called ``name``; a KeyError names the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(NAMES)}") from None


def owner(text: str, raw: bytes) -> Engine | None:
    """The engine that formatted this line (``raw``, cleaned to ``text``) as its own."""
    for candidate in ENGINES:
        if has_any(raw, candidate.markers) and candidate.owns(text):
            return candidate
    return None
