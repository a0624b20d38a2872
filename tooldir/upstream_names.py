"""The naming of upstream MCP tools, importable without the SDK: ``<package>__<tool>``."""

from __future__ import annotations

SEPARATOR = "__"
