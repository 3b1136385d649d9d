"""Analytic multiply-adds of a LoRA-Ensemble forward pass."""

from ensemble_zoo.utils.validation import check_positive_int


def lora_ensemble_multiply_adds(
    single_multiply_adds, num_members, tokens, num_layers, hidden_dim, rank, num_projections=4
):
    """Multiply-adds of one LoRA-Ensemble forward pass of one input.

    The input is tiled to every member and the frozen backbone runs on each
    copy, so the backbone and head cost `num_members` times the single
    model's (the paper, §5: "the backbone FLOPs are still about M x"); each
    adapted `hidden_dim x hidden_dim` projection adds
    `tokens * rank * 2 * hidden_dim` per member (`x A`, then `(x A) B`).

    Args:
        single_multiply_adds: int, the single model's multiply-adds (e.g.
            `hydra_multiply_adds(...)` with one member keeping every head).
        num_members: int.
        tokens: int, tokens per input (ViT-B/16 at 224: 197, see
            `ensemble_zoo.models.vit_cost.num_tokens`).
        num_layers: int, adapted attention layers.
        hidden_dim: int.
        rank: int.
        num_projections: int, adapted projections per layer (default 4).
    """
    for name, value in [
        ("num_members", num_members),
        ("tokens", tokens),
        ("num_layers", num_layers),
        ("hidden_dim", hidden_dim),
        ("rank", rank),
        ("num_projections", num_projections),
    ]:
        check_positive_int(value, name)
    adapters = num_layers * num_projections * tokens * rank * 2 * hidden_dim
    return int(num_members * (single_multiply_adds + adapters))
