"""The deep-ensemble presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "deep_ensemble_vit_tiny_digits": {
        "path": "deep_ensemble_vit_tiny_digits",
        "description": (
            "Deep ensemble of three independently seeded and trained copies "
            "of vit_tiny_digits (member 0 is vit_tiny_digits itself)."
        ),
    },
    "snapshot_ensemble_vit_tiny_digits": {
        "path": "snapshot_ensemble_vit_tiny_digits",
        "description": (
            "Snapshot Ensemble of vit_tiny_digits fine-tuned for 45 epochs: the weights at "
            "the end of a 15-epoch burn-in and of two 15-epoch cosine cycles."
        ),
    },
}
