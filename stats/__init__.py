"""Feature statistics for sqlfeed (see design.md section 7).

Layering: ``stats`` imports ``dialects`` and never ``sqlfeed``; it receives a callable that
runs a query and returns Arrow. The statistics themselves arrive with issue #5; until then
this package holds nothing, and nothing in sqlfeed pretends to compute statistics.
"""

from __future__ import annotations

__all__: list[str] = []
