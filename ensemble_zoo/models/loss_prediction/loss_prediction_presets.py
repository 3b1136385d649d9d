"""The loss-prediction presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "loss_prediction_vit_tiny_digits": {
        "path": "loss_prediction_vit_tiny_digits",
        "description": (
            "Pretrained visual uncertainties: a loss-prediction head (512-512) "
            "on the frozen vit_tiny_digits, trained from cached embeddings "
            "with the pairwise ranking loss; outputs logits and a per-sample "
            "uncertainty."
        ),
    },
    "loss_prediction_gemma_tiny_arithmetic": {
        "path": "loss_prediction_gemma_tiny_arithmetic",
        "description": (
            "Pretrained Visual Uncertainties' loss-prediction head per token "
            "on the frozen gemma_tiny_arithmetic, trained to rank answer "
            "tokens by that model's own loss; attach it to the LoRA-Ensemble "
            "preset."
        ),
    },
}
