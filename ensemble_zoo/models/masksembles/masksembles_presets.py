"""The Masksembles presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "masksembles_vit_tiny_digits": {
        "path": "masksembles_vit_tiny_digits",
        "description": (
            "Masksembles of 4 members (scale 2) fine-tuned from "
            "vit_tiny_digits: fixed, overlapping channel masks on every MLP "
            "block's hidden units and on the pooled features; all weights shared."
        ),
    },
    "masksembles_vit_b16_4": {
        "path": "masksembles_vit_b16_4",
        "description": (
            "Architecture only (random weights): Masksembles ViT-B/16 with 4 "
            "masks at scale 2 on every MLP block and the pooled features, "
            "1000 classes."
        ),
    },
}
