"""The code location: one ``Definitions``, assembled from each area's wiring in ``assets/``.

Nothing here touches a file, a database or the network: resources read their settings (and
open connections) only when a run or a tick uses them.
"""

import dagster as dg

from assets import area_definitions
from resources import default_resources


def build_defs() -> dg.Definitions:
    """Merge every area's definitions with the environment's resources."""
    return dg.Definitions.merge(*area_definitions(), dg.Definitions(resources=default_resources()))


defs = build_defs()
