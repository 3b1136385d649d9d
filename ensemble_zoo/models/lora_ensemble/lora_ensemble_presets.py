"""The LoRA-Ensemble presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
    "lora_ensemble_vit_tiny_digits": {
        "path": "lora_ensemble_vit_tiny_digits",
        "description": (
            "LoRA-Ensemble of 8 rank-4 members on the frozen vit_tiny_digits "
            "backbone (adapters on query, key, value and output "
            "projections), each with its own classifier head."
        ),
    },
    "laplace_lora_vit_tiny_digits": {
        "path": "laplace_lora_vit_tiny_digits",
        "description": (
            "Laplace-LoRA: 32 posterior samples of the adapters of a rank-4 LoRA "
            "fine-tune of vit_tiny_digits (Kronecker-factored Laplace), run as the "
            "members of one LoRA-Ensemble."
        ),
    },
    "blob_lora_vit_tiny_digits": {
        "path": "blob_lora_vit_tiny_digits",
        "description": (
            "BLoB: 10 samples of a rank-4 LoRA of vit_tiny_digits whose A matrices are "
            "Gaussians learned by backpropagation, run as the members of one "
            "LoRA-Ensemble."
        ),
    },
    "lora_ensemble_vit_b16_16x8": {
        "path": "lora_ensemble_vit_b16_16x8",
        "description": (
            "Architecture only (random weights): the LoRA-Ensemble paper's "
            "setting on a ViT-B/16 backbone, 16 members of rank 8 on "
            "query/key/value/output, 100 classes (CIFAR-100)."
        ),
    },
    "lora_ensemble_bert_base_8x64": {
        "path": "lora_ensemble_bert_base_8x64",
        "description": (
            "Architecture only (random weights): the LoRA-Ensemble paper's "
            "SST-2 setting, bert-base uncased with 8 members of rank 64, "
            "2 classes."
        ),
    },
    "lora_ensemble_gemma_tiny_arithmetic": {
        "path": "lora_ensemble_gemma_tiny_arithmetic",
        "description": (
            "LoRA-Ensemble of 4 rank-8 members on every attention and MLP "
            "projection of the frozen gemma_tiny_arithmetic, fine-tuned on "
            "the 2,000 training sums; generates with per-token uncertainty."
        ),
    },
    "lora_ensemble_gemma3_270m_arithmetic": {
        "path": "lora_ensemble_gemma3_270m_arithmetic",
        "description": (
            "Adapters only: a LoRA-Ensemble of 4 rank-8 members on the "
            "attention projections of Google's Gemma 3 270M (keras-hub's "
            "gemma3_270m, the base model it loads), fine-tuned for 2 epochs "
            "on the arithmetic task's 2,000 training sums."
        ),
    },
}
