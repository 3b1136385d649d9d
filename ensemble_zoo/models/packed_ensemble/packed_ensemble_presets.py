"""The Packed-Ensembles presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "packed_ensemble_vit_tiny_digits": {
        "path": "packed_ensemble_vit_tiny_digits",
        "description": (
            "Packed-Ensembles (M=3, alpha=2, gamma=1, the Hydra paper's "
            "setting) of "
            "vit_tiny_digits' geometry, trained from scratch: three 4-head "
            "ViTs of width 32 in one grouped network."
        ),
    },
    "packed_ensemble_vit_b16_3x2": {
        "path": "packed_ensemble_vit_b16_3x2",
        "description": (
            "Architecture only (random weights): Packed-Ensembles of ViT-B/16 "
            "in the Hydra paper's setting, M=3, alpha=2, gamma=1 (three 8-head "
            "ViTs of width 512), 1000 classes."
        ),
    },
}
