"""BigEarthNet's two class nomenclatures and the published mapping between them.

The 43 names are the CORINE Land Cover level-3 classes exactly as the v1.0 label JSON files spell them, in the order
of ``original_labels`` in the BigEarthNet-S2 models' ``label_indices.json``. The 19-class nomenclature and
``LABEL_CONVERSION`` (for each 19-class index, the 43-class indices merged into it) are from the same file; 11 of the
43 classes have no 19-class counterpart. Both lists are in the official (paper) order, not sorted: some tools
(ConfigILM) sort the 19 names, so class indices differ between tools. Sources: docs/bigearthnet-formats.md.
"""

from __future__ import annotations

from typing import Dict, List, Optional

LABELS_43 = (
    "Continuous urban fabric", "Discontinuous urban fabric", "Industrial or commercial units",
    "Road and rail networks and associated land", "Port areas", "Airports", "Mineral extraction sites", "Dump sites",
    "Construction sites", "Green urban areas", "Sport and leisure facilities", "Non-irrigated arable land",
    "Permanently irrigated land", "Rice fields", "Vineyards", "Fruit trees and berry plantations", "Olive groves",
    "Pastures", "Annual crops associated with permanent crops", "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation", "Agro-forestry areas",
    "Broad-leaved forest", "Coniferous forest", "Mixed forest", "Natural grassland", "Moors and heathland",
    "Sclerophyllous vegetation", "Transitional woodland/shrub", "Beaches, dunes, sands", "Bare rock",
    "Sparsely vegetated areas", "Burnt areas", "Inland marshes", "Peatbogs", "Salt marshes", "Salines",
    "Intertidal flats", "Water courses", "Water bodies", "Coastal lagoons", "Estuaries", "Sea and ocean",
)

LABELS_19 = (
    "Urban fabric", "Industrial or commercial units", "Arable land", "Permanent crops", "Pastures",
    "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation", "Agro-forestry areas",
    "Broad-leaved forest", "Coniferous forest", "Mixed forest", "Natural grassland and sparsely vegetated areas",
    "Moors, heathland and sclerophyllous vegetation", "Transitional woodland, shrub", "Beaches, dunes, sands",
    "Inland wetlands", "Coastal wetlands", "Inland waters", "Marine waters",
)

LABEL_CONVERSION = (
    (0, 1), (2,), (11, 12, 13), (14, 15, 16, 18), (17,), (19,), (20,), (21,), (22,), (23,), (24,), (25, 31),
    (26, 27), (28,), (29,), (33, 34), (35, 36), (38, 39), (40, 41, 42),
)

NOMENCLATURES = {43: LABELS_43, 19: LABELS_19}


def old_to_new() -> Dict[int, Optional[int]]:
    """For each 43-class index, its 19-class index, or None for the 11 classes the 19-class nomenclature drops."""
    mapping: Dict[int, Optional[int]] = {old: None for old in range(len(LABELS_43))}
    for new, olds in enumerate(LABEL_CONVERSION):
        for old in olds:
            mapping[old] = new
    return mapping


def v1_label_indices(names: List[str], nomenclature: int) -> List[int]:
    """Sorted class indices in ``nomenclature`` of a v1 patch's 43-class ``labels``; KeyError names an unknown one.

    In the 19-class nomenclature, names of dropped classes contribute nothing, so the list may be empty.
    """
    index43 = {name: i for i, name in enumerate(LABELS_43)}
    olds = []
    for name in names:
        if name not in index43:
            raise KeyError(name)
        olds.append(index43[name])
    if nomenclature == 43:
        return sorted(set(olds))
    mapping = old_to_new()
    return sorted({mapping[o] for o in olds if mapping[o] is not None})  # type: ignore[misc]
