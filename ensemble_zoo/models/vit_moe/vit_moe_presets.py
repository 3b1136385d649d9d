"""The ViT-MoE, E³ and router presets that ship with ensemble_zoo: name -> directory
under the preset root and a one-line description.

Pure data, no imports: `ensemble_zoo.presets.registry` and the command line
read this file by its path (see there).
"""

PRESETS = {
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
            "Architecture only (random weights): V-MoE in the V-MoE paper's 8-block "
            "S/32 at 384 px, 32 experts in the last two odd blocks, 2 experts per "
            "token, 1000 classes."
        ),
    },
    "e3_s32_e32_k1_m2": {
        "path": "e3_s32_e32_k1_m2",
        "description": (
            "Architecture only (random weights): E3 on the V-MoE paper's 8-block "
            "S/32 at 384 px, 32 experts in the last two odd blocks split between "
            "2 members, 1 expert per "
            "token, 1000 classes; the same parameters as the V-MoE."
        ),
    },
}
