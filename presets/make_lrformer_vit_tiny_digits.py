"""Rebuilds the `lrformer_vit_tiny_digits` preset.

The LoRA-Ensemble paper's "LRFormer" baseline (Ye et al. 2023, "Mitigating
Transformer Overconfidence via Lipschitz Regularization"): the ViT of
`vit_tiny_digits` with Lipschitz-regularized self-attention
(`ez.models.LRFormerViTBackbone`), trained as `vit_tiny_digits` and
`l2_attention_vit_tiny_digits` were (seed 0, 150 epochs, AdamW with
learning rate 3e-3 cosine to 0 and weight decay 0.05, one-pixel random
translations). One member: a single-model uncertainty baseline.

`alpha` is 10, the best validation NLL of 1, 10, 100 (the layer's
default) and 1000: 0.111, 0.048, 0.100 and 1.221 (validation accuracy
0.965, 0.986, 0.969, 0.545; at 1000 every token attends to itself).

Run from the repository root (about 2 minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_lrformer_vit_tiny_digits.py
"""

from make_l2_attention_vit_tiny_digits import arguments
from make_l2_attention_vit_tiny_digits import train_and_save

import ensemble_zoo as ez

NAME = "lrformer_vit_tiny_digits"


def main():
    parser = arguments(__doc__)
    parser.add_argument("--alpha", type=float, default=10.0)
    args = parser.parse_args()
    train_and_save(
        NAME,
        ez.models.LRFormerViTBackbone,
        {"alpha": args.alpha},
        "lrformer (lipschitz-regularized attention)",
        args,
    )


if __name__ == "__main__":
    main()
