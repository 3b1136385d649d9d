"""The implicit-ensemble presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "subnetwork_vit_tiny_digits": {
        "path": "subnetwork_vit_tiny_digits",
        "description": (
            "Masked sub-networks of the frozen vit_tiny_digits (Ensembles of "
            "Ensembles, extraction A): 10 members with learned row and "
            "column masks on every transformer MLP, diversity weight 2.0."
        ),
    },
    "tile_vit_tiny_digits": {
        "path": "tile_vit_tiny_digits",
        "description": (
            "Tiles of vit_gap_tiny_digits (Ensembles of Ensembles, extraction "
            "B): the "
            "head applied to each 2 x 2 quarter of the 4 x 4 patch grid, "
            "four members; no training."
        ),
    },
}
