"""The MC-dropout presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "mc_dropout_vit_tiny_digits": {
        "path": "mc_dropout_vit_tiny_digits",
        "description": (
            "MC dropout: 8 seeded dropout samples of vit_tiny_digits at its "
            "training rates (0.1), run as one tiled batch; no training."
        ),
    }
}
