"""The baseline presets that ship with ensemble_zoo: name -> directory
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
    },
    "l2_attention_vit_tiny_digits": {
        "path": "l2_attention_vit_tiny_digits",
        "description": (
            "The vit_tiny_digits ViT with L2 self-attention (Kim et al. 2021; the "
            "LoRA-Ensemble paper's L2 baseline), trained as vit_tiny_digits: a single model."
        ),
    },
    "lrformer_vit_tiny_digits": {
        "path": "lrformer_vit_tiny_digits",
        "description": (
            "The vit_tiny_digits ViT with LRFormer's Lipschitz-regularized self-attention "
            "(Ye et al. 2023; the LoRA-Ensemble paper's LRFormer baseline), trained as "
            "vit_tiny_digits: a single model."
        ),
    },
    "clip_zero_shot_tiny_digits": {
        "path": "clip_zero_shot_tiny_digits",
        "description": (
            "A small CLIP trained contrastively on the digits and their captions, as a "
            "zero-shot classifier of the digits 0-7 ('a photo of a {}.'): a single model."
        ),
    },
}
