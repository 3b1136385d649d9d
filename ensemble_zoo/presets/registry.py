"""The names of the presets that ship with ensemble_zoo.

Each entry maps a preset name to its directory under the preset root
(`presets/` in a source checkout, `ensemble_zoo/_preset_files/` in an
installed wheel) and a one-line description. `metadata.json` inside the
directory holds the rest (method, members, parameters, test metrics).
"""

PRESETS = {
    "vit_tiny_digits": {
        "path": "vit_tiny_digits",
        "description": (
            "The base model: a 4-layer, 6-head keras-hub ViT (hidden 48, "
            "patch 2) trained on the bundled digits 0-7; a one-member "
            "ensemble."
        ),
    },
    "vit_gap_tiny_digits": {
        "path": "vit_gap_tiny_digits",
        "description": (
            "vit_tiny_digits' backbone and recipe with an average-pooled "
            "head (keras-hub pooling='gap'), the base of tile_vit_tiny_digits; "
            "a one-member ensemble."
        ),
    },
    "mc_dropout_vit_tiny_digits": {
        "path": "mc_dropout_vit_tiny_digits",
        "description": (
            "MC dropout: 8 seeded dropout samples of vit_tiny_digits at its "
            "training rates (0.1), run as one tiled batch; no training."
        ),
    },
    "subnetwork_vit_tiny_digits": {
        "path": "subnetwork_vit_tiny_digits",
        "description": (
            "Masked sub-networks of the frozen vit_tiny_digits (Ensembles of "
            "Ensembles, extraction A): 10 members with learned row and "
            "column masks on every transformer MLP, diversity weight 2.0."
        ),
    },
    "tile_vit_tiny_digits": {
        "path": "tile_vit_tiny_digits",
        "description": (
            "Tiles of vit_gap_tiny_digits (Ensembles of Ensembles, extraction "
            "B): the "
            "head applied to each 2 x 2 quarter of the 4 x 4 patch grid, "
            "four members; no training."
        ),
    },
    "deep_ensemble_vit_tiny_digits": {
        "path": "deep_ensemble_vit_tiny_digits",
        "description": (
            "Deep ensemble of three independently seeded and trained copies "
            "of vit_tiny_digits (member 0 is vit_tiny_digits itself)."
        ),
    },
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
    "batch_ensemble_vit_tiny_digits": {
        "path": "batch_ensemble_vit_tiny_digits",
        "description": (
            "BatchEnsemble of 4 members fine-tuned from vit_tiny_digits: "
            "shared kernels with per-member rank-1 fast weights and biases "
            "on every attention and MLP projection and on the head."
        ),
    },
    "packed_ensemble_vit_tiny_digits": {
        "path": "packed_ensemble_vit_tiny_digits",
        "description": (
            "Packed-Ensembles (M=3, alpha=2, gamma=1, the Hydra paper's "
            "setting) of "
            "vit_tiny_digits' geometry, trained from scratch: three 4-head "
            "ViTs of width 32 in one grouped network."
        ),
    },
    "masksembles_vit_tiny_digits": {
        "path": "masksembles_vit_tiny_digits",
        "description": (
            "Masksembles of 4 members (scale 2) fine-tuned from "
            "vit_tiny_digits: fixed, overlapping channel masks on every MLP "
            "block's hidden units and on the pooled features; all weights shared."
        ),
    },
    "mimo_vit_tiny_digits": {
        "path": "mimo_vit_tiny_digits",
        "description": (
            "MIMO of 3 members fine-tuned from vit_tiny_digits (the E³ paper, "
            "App. B.3: patch kernel and head replicated and scaled by 1/3): "
            "three stacked inputs, three heads, input repetition 0.5, "
            "batch repetition 4."
        ),
    },
    "lora_ensemble_vit_tiny_digits": {
        "path": "lora_ensemble_vit_tiny_digits",
        "description": (
            "LoRA-Ensemble of 8 rank-4 members on the frozen vit_tiny_digits "
            "backbone (adapters on query, key, value and output "
            "projections), each with its own classifier head."
        ),
    },
    "loss_prediction_vit_tiny_digits": {
        "path": "loss_prediction_vit_tiny_digits",
        "description": (
            "Pretrained visual uncertainties: a loss-prediction head (512-512) "
            "on the frozen vit_tiny_digits, trained from cached embeddings "
            "with the pairwise ranking loss; outputs logits and a per-sample "
            "uncertainty."
        ),
    },
    "vmoe_vit_tiny_digits": {
        "path": "vmoe_vit_tiny_digits",
        "description": (
            "V-MoE upcycled from vit_tiny_digits: 4 experts (copies of the "
            "MLP) in blocks 1 and 3, 2 experts per token, trained on digits."
        ),
    },
    "e3_vit_tiny_digits": {
        "path": "e3_vit_tiny_digits",
        "description": (
            "E3 (efficient ensemble of experts) from the same upstream V-MoE: "
            "2 members, each routing every token to 1 of its own 2 experts, "
            "same parameters as the V-MoE; fine-tuned on digits."
        ),
    },
    "experts_choice_vit_tiny_digits": {
        "path": "experts_choice_vit_tiny_digits",
        "description": (
            "V-MoE with Experts Choice routing (vmoe's "
            "NoisyTopItemsPerExpertRouter) upcycled from vit_tiny_digits: 4 "
            "experts in blocks 1 and 3, each taking its top 9 of the 17 "
            "tokens of an image (capacity factor 2), trained on digits."
        ),
    },
    "soft_moe_vit_tiny_digits": {
        "path": "soft_moe_vit_tiny_digits",
        "description": (
            "Soft MoE (vmoe's SoftRouter) upcycled from vit_tiny_digits: 4 "
            "experts with 8 slots each in blocks 1 and 3, every slot a "
            "softmax mix of an image's tokens, trained on digits."
        ),
    },
    "soft_moe_s16_e128": {
        "path": "soft_moe_s16_e128",
        "description": (
            "Architecture only (random weights): Soft MoE S/16 of the Soft "
            "MoE paper, 224 px, mean pooling, 128 experts of 1 slot in the "
            "last 6 of 12 blocks, JFT-4B's 29,593 classes."
        ),
    },
    "soft_moe_b16_e128": {
        "path": "soft_moe_b16_e128",
        "description": (
            "Architecture only (random weights): Soft MoE B/16 of the Soft "
            "MoE paper, 224 px, mean pooling, 128 experts of 1 slot in the "
            "last 6 of 12 blocks, JFT-4B's 29,593 classes."
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
    "batch_ensemble_vit_b16_3": {
        "path": "batch_ensemble_vit_b16_3",
        "description": (
            "Architecture only (random weights): BatchEnsemble of 3 members "
            "on every projection of ViT-B/16 (the Hydra paper's baseline), "
            "1000 classes."
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
    "masksembles_vit_b16_4": {
        "path": "masksembles_vit_b16_4",
        "description": (
            "Architecture only (random weights): Masksembles ViT-B/16 with 4 "
            "masks at scale 2 on every MLP block and the pooled features, "
            "1000 classes."
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
    "vmoe_b16_e32_k2": {
        "path": "vmoe_b16_e32_k2",
        "description": (
            "Architecture only (random weights): V-MoE ViT-B/16 at 384 px, 32 experts "
            "in the last two odd blocks, 2 experts per token, 1000 classes."
        ),
    },
    "e3_b16_e32_k1_m2": {
        "path": "e3_b16_e32_k1_m2",
        "description": (
            "Architecture only (random weights): E3 ViT-B/16 at 384 px, 32 experts in "
            "the last two odd blocks split between 2 members, 1 expert per "
            "token, 1000 classes; the same parameters as the V-MoE."
        ),
    },
    "vmoe_s32_e32_k2": {
        "path": "vmoe_s32_e32_k2",
        "description": (
            "Architecture only (random weights): V-MoE the V-MoE paper's 8-block S/32 at 384 px, 32 experts "
            "in the last two odd blocks, 2 experts per token, 1000 classes."
        ),
    },
    "e3_s32_e32_k1_m2": {
        "path": "e3_s32_e32_k1_m2",
        "description": (
            "Architecture only (random weights): E3 the V-MoE paper's 8-block S/32 at 384 px, 32 experts in "
            "the last two odd blocks split between 2 members, 1 expert per "
            "token, 1000 classes; the same parameters as the V-MoE."
        ),
    },
    "gemma_tiny_arithmetic": {
        "path": "gemma_tiny_arithmetic",
        "description": (
            "A 4-layer keras-hub GemmaCausalLM (hidden 64, character-level "
            "tokenizer) pretrained on 1,000 of the bundled arithmetic task's "
            "sums (a + b, a and b in 0-49); one model."
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
