"""The Hydra presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "hydra_taylor_vit_tiny_digits": {
        "path": "hydra_taylor_vit_tiny_digits",
        "description": (
            "Hydra Ensemble of 3 members pruned from vit_tiny_digits by "
            "Taylor head importance (each keeps 16 of 24 heads), fine-tuned "
            "separately and fused with a merged MLP."
        ),
    },
    "hydra_circuit_vit_tiny_digits": {
        "path": "hydra_circuit_vit_tiny_digits",
        "description": (
            "Hydra Ensemble of 3 circuit members (accuracy, OOD AUROC and "
            "their average; each keeps 16 of 24 heads) pruned from "
            "vit_tiny_digits, fine-tuned separately and fused with a merged "
            "MLP."
        ),
    },
    "hydra_clip_zero_shot_tiny_digits": {
        "path": "hydra_clip_zero_shot_tiny_digits",
        "description": (
            "Zero-shot Hydra Ensemble of 3 circuit members (accuracy, OOD AUROC and "
            "their average) pruned from clip_zero_shot_tiny_digits, heads of both "
            "encoders searched jointly; no training."
        ),
    },
    "hydra_vit_b16_8x3": {
        "path": "hydra_vit_b16_8x3",
        "description": (
            "Architecture only (random weights): the Hydra paper's ViT-B/16 "
            "ensemble of 3 members keeping 8 of 12 heads per layer, merged "
            "MLPs; 116.5M parameters, 46.2G multiply-adds."
        ),
    },
    "hydra_bert_base_6x3": {
        "path": "hydra_bert_base_6x3",
        "description": (
            "Architecture only (random weights): the Hydra paper's "
            "bert-base ensemble for SST-2, 3 members keeping 6 of 12 heads "
            "per layer, merged MLPs, 2 classes."
        ),
    },
}
