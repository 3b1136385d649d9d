"""The BatchEnsemble presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "batch_ensemble_vit_tiny_digits": {
        "path": "batch_ensemble_vit_tiny_digits",
        "description": (
            "BatchEnsemble of 4 members fine-tuned from vit_tiny_digits: "
            "shared kernels with per-member rank-1 fast weights and biases "
            "on every attention and MLP projection and on the head."
        ),
    },
    "batch_ensemble_vit_b16_3": {
        "path": "batch_ensemble_vit_b16_3",
        "description": (
            "Architecture only (random weights): BatchEnsemble of 3 members "
            "on every projection of ViT-B/16 (the Hydra paper's baseline), "
            "1000 classes."
        ),
    },
}
