"""The MIMO presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "mimo_vit_tiny_digits": {
        "path": "mimo_vit_tiny_digits",
        "description": (
            "MIMO of 3 members fine-tuned from vit_tiny_digits (the E³ paper, "
            "App. B.3: patch kernel and head replicated and scaled by 1/3): "
            "three stacked inputs, three heads, input repetition 0.5, "
            "batch repetition 4."
        ),
    },
    "mimo_vit_b16_3": {
        "path": "mimo_vit_b16_3",
        "description": (
            "Architecture only (random weights): MIMO ViT-B/16 with 3 stacked "
            "inputs and heads, input repetition 0.5, batch repetition 4 "
            "(the Hydra paper's setting), 1000 classes."
        ),
    },
}
