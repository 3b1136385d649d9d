"""Writes the architecture presets (configurations of the papers, no
weights): `from_preset` builds them with random initial weights.

- `hydra_vit_b16_8x3`: the Hydra paper's ViT-B/16 configuration (224x224,
  12 layers, 12 heads of 64, MLP 3072, 1000 classes) with 3 members that
  keep 8 heads in every layer, merged MLPs, per-member layer norms and
  classifier heads: 116.54M parameters (paper: 116.31M) and 46.17G
  multiply-adds (paper: 46.19G). Which heads a member keeps is decided by
  pruning a trained ViT-B/16 (`HydraImageClassifier.from_keras_hub`); the
  preset fixes only the counts.

- `hydra_bert_base_6x3`: the paper's BERT setting (§5.2): bert-base
  (30,522-token vocabulary, 12 layers, 12 heads, hidden 768, MLP 3072) with
  3 members keeping 6 heads per layer and 2 classes (SST-2); multiply-adds
  are counted for 128 tokens, the paper's max_length.

- `lora_ensemble_vit_b16_16x8`: LoRA-Ensemble (the LoRA-Ensemble paper,
  "LoRA-Ensemble: Efficient Uncertainty Modelling for Self-Attention
  Networks") on ViT-B/16, 16 members of rank 8 on query/key/value/output,
  100 classes (the paper's CIFAR-100 setting; its backbone there is
  ViT-B/32): 10.7M trainable parameters on the frozen 85.8M backbone.

- `lora_ensemble_bert_base_8x64`: the paper's SST-2 setting (App. A.7):
  bert-base uncased, 8 members of rank 64, 2 classes.

- `vmoe_b16_e32_k2`, `e3_b16_e32_k1_m2`, `vmoe_s32_e32_k2`,
  `e3_s32_e32_k1_m2`: the V-MoE / E³ paper's ("Sparse MoEs meet Efficient
  Ensembles") fine-tuning configurations at 384 px with 1000 classes:
  ViT-B/16 (12 blocks) and the V-MoE "S/32" (8 blocks, hidden 512, MLP
  2048, 8 heads), E = 32 experts in the last two odd blocks (9 and 11, or
  5 and 7); V-MoE with K = 2, E³ with M = 2 members of K = 1. Their
  multiply-adds are forward multiply-adds of the `ensemble_zoo`
  implementation at inference (`vit_moe_flops` with one routing group per
  image, capacity factor 8, einsum dispatch and combine counted: expert
  MLPs run on every buffer slot, so the paper's evaluation capacity costs
  more than its training capacity 1.5, also recorded).

- `packed_ensemble_vit_b16_3x2`, `batch_ensemble_vit_b16_3`,
  `mimo_vit_b16_3`, `masksembles_vit_b16_4`: the efficient-ensemble
  baselines of the Hydra paper ("Ensembling Pruned Attention Heads for
  Uncertainty-Aware Efficient Transformers", Table 1, App. C.1.4: ViT-B/16
  on ImageNet-1k, E = 3; Packed-Ensembles with alpha = 2, gamma = 1; MIMO
  with input repetition 0.5 and batch repetition 4) and Masksembles with
  the Masksembles paper's 4 masks at scale 2 (the LoRA-Ensemble paper
  compares it; its ViT setting is not given). Multiply-adds: Packed-Ensembles by
  `packed_ensemble_multiply_adds`; BatchEnsemble and Masksembles run the
  whole ViT once per member (M x the single model; their element-wise
  fast-weight and mask products are not multiply-adds, as layer norms
  are not); MIMO runs the ViT once, plus the wider patch embedding and
  M heads.

- `soft_moe_s16_e128`, `soft_moe_b16_e128`: the Soft MoE paper's
  (Puigcerver et al. 2023, vmoe's `projects/soft_moe`) JFT-4B models at
  224 px: ViT-S/16 and B/16 without class token (mean pooling), the last
  6 of 12 blocks Soft MoE with 128 experts of one slot, 29,593 classes.
  Recorded with the paper's parameters and eval GFLOP (Table 8 of arXiv
  2308.00951v2) and the dense ViT's, counted the same way. Building B/16
  takes its 3.7 B float32 parameters (about 15 GB of memory).

Run from the repository root (a few seconds, minutes for `soft_moe`;
`moe`, `soft_moe [name ...]` or `baselines` writes only those presets):

    KERAS_BACKEND=jax python presets/make_architecture_presets.py [moe|soft_moe|baselines]
"""

import os
import sys

import numpy as np

import ensemble_zoo as ez
from ensemble_zoo.models.hydra.hydra_cost import hydra_multiply_adds
from ensemble_zoo.models.hydra.hydra_cost import hydra_text_multiply_adds
from ensemble_zoo.models.lora_ensemble.lora_ensemble_cost import lora_ensemble_multiply_adds
from ensemble_zoo.models.packed_ensemble.packed_ensemble_cost import packed_ensemble_multiply_adds
from ensemble_zoo.models.vit_cost import num_tokens
from ensemble_zoo.models.vit_cost import patch_embedding_multiply_adds
from ensemble_zoo.models.vit_moe.moe_cost import vit_moe_flops

HERE = os.path.dirname(os.path.abspath(__file__))

VIT_B16 = dict(
    image_shape=(224, 224, 3),
    patch_size=16,
    num_layers=12,
    num_heads=12,
    hidden_dim=768,
    mlp_dim=3072,
)


def main():
    heads = [[8, 8, 8]] * 12
    backbone = ez.models.HydraBackbone(
        **VIT_B16, num_members=3, member_num_heads=heads, mlp="merge"
    )
    model = ez.models.HydraImageClassifier(backbone, num_classes=1000)
    macs = hydra_multiply_adds(**VIT_B16, num_classes=1000, num_members=3, member_num_heads=heads)
    name = "hydra_vit_b16_8x3"
    model.save_to_preset(
        os.path.join(HERE, name),
        metadata={
            "method": "hydra (architecture)",
            "description": ez.presets.PRESETS[name]["description"],
            "multiply_adds": macs,
            "paper": {"parameters": 116.31e6, "multiply_adds": 46.19e9},
            "script": "presets/make_architecture_presets.py",
        },
        include_weights=False,
    )
    print(name, ez.presets.preset_metadata(name)["parameter_count"], macs)

    bert = dict(
        vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072
    )
    heads = [[6, 6, 6]] * 12
    backbone = ez.models.HydraTextBackbone(
        **bert, num_members=3, member_num_heads=heads, mlp="merge"
    )
    model = ez.models.HydraTextClassifier(backbone, num_classes=2)
    encoder = {k: v for k, v in bert.items() if k != "vocabulary_size"}
    macs = hydra_text_multiply_adds(
        128, **encoder, num_classes=2, num_members=3, member_num_heads=heads
    )
    name = "hydra_bert_base_6x3"
    model.save_to_preset(
        os.path.join(HERE, name),
        metadata={
            "method": "hydra (architecture)",
            "description": ez.presets.PRESETS[name]["description"],
            "multiply_adds": macs,
            "multiply_adds_sequence_length": 128,
            "script": "presets/make_architecture_presets.py",
        },
        include_weights=False,
    )
    print(name, ez.presets.preset_metadata(name)["parameter_count"], macs)
    lora_presets()


def trainable_count(model):
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))


def lora_presets():
    import keras_hub

    vit = keras_hub.models.ViTBackbone(**VIT_B16)
    model = ez.models.LoRAEnsembleImageClassifier(vit, num_classes=100, num_members=16, rank=8)
    single = hydra_multiply_adds(**VIT_B16, num_classes=100)
    tokens = num_tokens(VIT_B16["image_shape"], VIT_B16["patch_size"])  # 197
    macs = lora_ensemble_multiply_adds(single, 16, tokens, 12, 768, 8)
    save_lora(model, "lora_ensemble_vit_b16_16x8", macs)
    bert = keras_hub.models.BertBackbone(
        vocabulary_size=30522,
        num_layers=12,
        num_heads=12,
        hidden_dim=768,
        intermediate_dim=3072,
        max_sequence_length=512,
    )
    model = ez.models.LoRAEnsembleTextClassifier(bert, num_classes=2, num_members=8, rank=64)
    encoder = dict(num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072)
    single = hydra_text_multiply_adds(128, **encoder, num_classes=2)
    macs = lora_ensemble_multiply_adds(single, 8, 128, 12, 768, 64)
    save_lora(model, "lora_ensemble_bert_base_8x64", macs, sequence_length=128)


def save_lora(model, name, macs, sequence_length=None):
    extra = {} if sequence_length is None else {"multiply_adds_sequence_length": sequence_length}
    model.save_to_preset(
        os.path.join(HERE, name),
        metadata={
            "method": "lora_ensemble (architecture)",
            "description": ez.presets.PRESETS[name]["description"],
            "trainable_parameter_count": trainable_count(model),
            "multiply_adds": macs,
            **extra,
            "script": "presets/make_architecture_presets.py",
        },
        include_weights=False,
    )
    print(name, ez.presets.preset_metadata(name)["parameter_count"], trainable_count(model), macs)


MOE_FAMILIES = {
    "b16": dict(patch_size=16, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072),
    "s32": dict(patch_size=32, num_layers=8, num_heads=8, hidden_dim=512, mlp_dim=2048),
}


def moe_presets(image_size=384, num_classes=1000, num_experts=32):
    for family, vit in MOE_FAMILIES.items():
        moe_layers = [vit["num_layers"] - 3, vit["num_layers"] - 1]
        tokens = num_tokens((image_size, image_size), vit["patch_size"])
        for name, members, k in ((f"vmoe_{family}_e32_k2", 1, 2), (f"e3_{family}_e32_k1_m2", 2, 1)):
            backbone = ez.models.ViTMoEBackbone(
                image_shape=(image_size, image_size, 3),
                **vit,
                num_experts=num_experts,
                num_selected_experts=k,
                moe_layers=moe_layers,
                ensemble_size=members,
            )
            model = ez.models.ViTMoEImageClassifier(backbone, num_classes)

            def cost(capacity_factor):
                return int(
                    vit_moe_flops(
                        image_size=image_size,
                        patch_size=vit["patch_size"],
                        hidden_dim=vit["hidden_dim"],
                        num_layers=vit["num_layers"],
                        mlp_dim=vit["mlp_dim"],
                        num_classes=num_classes,
                        moe_layers=moe_layers,
                        num_experts=num_experts,
                        num_selected_experts=k,
                        ensemble_size=members,
                        capacity_factor=capacity_factor,
                        group_size=tokens,
                        capacity_multiple_of=1,
                    )["total"]
                )

            macs = cost(backbone.eval_capacity_factor)
            model.save_to_preset(
                os.path.join(HERE, name),
                metadata={
                    "method": ("v-moe" if members == 1 else "e3") + " (architecture)",
                    "description": ez.presets.PRESETS[name]["description"],
                    "multiply_adds": macs,
                    "multiply_adds_capacity_factor": backbone.eval_capacity_factor,
                    "multiply_adds_at_training_capacity": cost(backbone.capacity_factor),
                    "training_capacity_factor": backbone.capacity_factor,
                    "script": "presets/make_architecture_presets.py",
                },
                include_weights=False,
            )
            print(name, ez.presets.preset_metadata(name)["parameter_count"], macs)
            del model, backbone


#: The Soft MoE paper's Table 8 (arXiv 2308.00951v2, App. F.3), JFT-4B
#: models (29,593 classes) at 224 px: parameters and eval GFLOP per image.
SOFT_MOE_PAPER = {
    "soft_moe_s16_e128": (
        "S/16",
        {"parameters": 933e6, "gflops": 8.6},
        {"parameters": 33e6, "gflops": 9.2},
    ),
    "soft_moe_b16_e128": (
        "B/16",
        {"parameters": 3.7e9, "gflops": 32.0},
        {"parameters": 108e6, "gflops": 35.1},
    ),
}
JFT_CLASSES = 29593


def soft_moe_presets(names=None):
    """Soft MoE S/16 and B/16 with 128 experts of 1 slot in the last 6 of
    12 blocks, mean pooling, JFT-4B's 29,593 classes (the paper's Table 8
    counts parameters with that head), 224 px; the paper's numbers and
    the dense ViT's, built and counted the same way, are recorded."""
    import keras_hub

    from ensemble_zoo.models.vit_moe import soft_moe_config

    for name, (model_name, paper, paper_dense) in SOFT_MOE_PAPER.items():
        if names and name not in names:
            continue
        config = soft_moe_config(model_name, num_classes=JFT_CLASSES)
        backbone = ez.models.ViTMoEBackbone(**config["backbone"])
        model = ez.models.ViTMoEImageClassifier(backbone, JFT_CLASSES, pooling="gap")
        macs = int(vit_moe_flops(**config["flops"])["total"])
        dense_flops = dict(
            config["flops"], moe_layers=(), num_experts=0, router="top_k", num_slots=None
        )
        dense_macs = int(vit_moe_flops(**dense_flops)["total"])
        vit = config["backbone"]
        dense = keras_hub.models.ViTBackbone(
            image_shape=vit["image_shape"],
            patch_size=vit["patch_size"],
            num_layers=vit["num_layers"],
            num_heads=vit["num_heads"],
            hidden_dim=vit["hidden_dim"],
            mlp_dim=vit["mlp_dim"],
            use_class_token=False,
        )
        dense_params = dense.count_params() + (vit["hidden_dim"] + 1) * JFT_CLASSES
        model.save_to_preset(
            os.path.join(HERE, name),
            metadata={
                "method": "soft moe (architecture)",
                "description": ez.presets.PRESETS[name]["description"],
                "multiply_adds": macs,
                "dense_vit": {"parameters": int(dense_params), "multiply_adds": dense_macs},
                "paper": {
                    **paper,
                    "dense_vit": paper_dense,
                    "source": "arXiv 2308.00951v2, Table 8",
                },
                "script": "presets/make_architecture_presets.py",
            },
            include_weights=False,
        )
        print(
            name,
            ez.presets.preset_metadata(name)["parameter_count"],
            macs,
            dense_params,
            dense_macs,
        )
        del model, backbone


def baseline_presets(num_classes=1000):
    import keras_hub

    single = hydra_multiply_adds(**VIT_B16, num_classes=num_classes)
    models = {}
    models["packed_ensemble_vit_b16_3x2"] = (
        ez.models.PackedEnsembleImageClassifier(
            ez.models.PackedEnsembleBackbone(**VIT_B16, num_members=3, alpha=2, gamma=1),
            num_classes,
        ),
        packed_ensemble_multiply_adds(
            **VIT_B16, num_classes=num_classes, num_members=3, alpha=2, gamma=1
        ),
        "packed_ensemble",
    )
    models["batch_ensemble_vit_b16_3"] = (
        ez.models.BatchEnsembleImageClassifier(
            keras_hub.models.ViTBackbone(**VIT_B16), num_classes, num_members=3
        ),
        3 * single,
        "batch_ensemble",
    )
    models["mimo_vit_b16_3"] = (
        ez.models.MIMOImageClassifier(
            keras_hub.models.ViTBackbone(**dict(VIT_B16, image_shape=(224, 224, 9))),
            num_classes,
            num_members=3,
        ),
        # Two more input images in the patch embedding, two more heads.
        single
        + 2 * (patch_embedding_multiply_adds(VIT_B16["image_shape"], 16, 768) + 768 * num_classes),
        "mimo",
    )
    models["masksembles_vit_b16_4"] = (
        ez.models.MasksemblesImageClassifier(
            keras_hub.models.ViTBackbone(**VIT_B16), num_classes, num_members=4, scale=2.0, seed=0
        ),
        4 * single,
        "masksembles",
    )
    for name, (model, macs, method) in models.items():
        model.save_to_preset(
            os.path.join(HERE, name),
            metadata={
                "method": f"{method} (architecture)",
                "description": ez.presets.PRESETS[name]["description"],
                "multiply_adds": int(macs),
                "script": "presets/make_architecture_presets.py",
            },
            include_weights=False,
        )
        print(name, ez.presets.preset_metadata(name)["parameter_count"], macs)


if __name__ == "__main__":
    if sys.argv[1:] == ["moe"]:
        moe_presets()
    elif sys.argv[1:2] == ["soft_moe"]:
        soft_moe_presets(sys.argv[2:])
    elif sys.argv[1:] == ["baselines"]:
        baseline_presets()
    else:
        main()
        moe_presets()
        soft_moe_presets()
        baseline_presets()
