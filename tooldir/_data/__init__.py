"""Data shipped inside the package: drill scenarios, policy presets and the threat list.

They live here (not only in the source checkout) so that a plain, non-editable install can run
``tooldir drill`` and show the presets. The repository's top-level ``fixtures/poisoned``,
``policies`` and ``docs/THREATS.md`` are symlinks to these folders.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent
SCENARIOS = DATA / "scenarios"
"""The bundled poisoned-directory scenarios (format: ``scenarios/README.md``)."""
PRESETS = DATA / "policies"
"""Policy presets: ``default.toml`` (the built-in defaults, spelled out), ``strict.toml``, ..."""
THREATS = DATA / "THREATS.md"
"""The threat list every drill names an id of."""

__all__ = ["DATA", "PRESETS", "SCENARIOS", "THREATS"]
