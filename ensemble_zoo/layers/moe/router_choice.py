"""Which router a `SparseMoE` builds (`router="top_k"`, `"experts_choice"`
or `"soft"`), and the arguments each router refuses."""

from ensemble_zoo.layers.moe.experts_choice_router import ExpertsChoiceRouter
from ensemble_zoo.layers.moe.soft_router import SoftRouter
from ensemble_zoo.layers.moe.top_k_router import TopKRouter

#: The routers of `SparseMoE(router=...)`.
ROUTERS = ("top_k", "experts_choice", "soft")


def check_router_arguments(
    router, top_k, batch_priority, dispatcher, num_slots, capacity_factor, eval_capacity_factor
):
    """Refuses arguments that the chosen router cannot honour."""
    if router not in ROUTERS:
        raise ValueError(f"`router` must be one of {ROUTERS}; got {router!r}.")
    if router == "top_k":
        if num_slots is not None:
            raise ValueError(
                "`num_slots` is Soft MoE's (router='soft'); got "
                f"num_slots={num_slots!r} with router='top_k'."
            )
        return
    name = "Experts Choice" if router == "experts_choice" else "Soft MoE"
    if top_k != 1:
        raise ValueError(
            f"`top_k`={top_k!r} is the top-K router's; {name} "
            f"(router={router!r}) does not choose experts per token, so "
            "`top_k` must be 1."
        )
    if batch_priority:
        raise ValueError(
            f"`batch_priority`=True is the top-K router's; {name} "
            f"(router={router!r}) has no token priority."
        )
    if router == "soft" and dispatcher != "einsum":
        raise ValueError(
            f"`dispatcher`={dispatcher!r}: Soft MoE (router='soft') "
            "dispatches with einsums only (as vmoe): every slot mixes every "
            "token, so there is nothing to index."
        )
    if router == "experts_choice" and num_slots is not None:
        raise ValueError(
            "`num_slots` is Soft MoE's (router='soft'); Experts Choice "
            "takes its capacity from `capacity_factor`."
        )
    if (
        router == "soft"
        and num_slots is None
        and eval_capacity_factor is not None
        and eval_capacity_factor != capacity_factor
    ):
        raise ValueError(
            "Soft MoE's slots are weights (`mu`), so one slot count serves "
            "training and inference: pass `num_slots`, or leave "
            "`eval_capacity_factor` None (or equal to `capacity_factor`); "
            f"got capacity_factor={capacity_factor!r}, "
            f"eval_capacity_factor={eval_capacity_factor!r}."
        )


def make_router(
    router,
    *,
    num_experts,
    top_k,
    num_members,
    group_size,
    capacity_factor,
    eval_capacity_factor,
    capacity_multiple_of,
    capacity_rounding,
    batch_priority,
    noise_std,
    importance_loss_weight,
    load_loss_weight,
    num_slots,
    kernel_initializer,
    seed,
):
    """The router layer of `SparseMoE(router=...)`; it routes in float32
    under mixed precision (as vmoe)."""
    common = dict(
        num_experts=num_experts,
        num_members=num_members,
        group_size=group_size,
        capacity_factor=capacity_factor,
        capacity_multiple_of=capacity_multiple_of,
        noise_std=noise_std,
        seed=seed,
        dtype="float32",
        name="router",
    )
    if router == "soft":
        return SoftRouter(
            num_slots=num_slots,
            capacity_rounding=capacity_rounding or "round",
            mu_initializer=kernel_initializer,
            compute_similarity_metrics=False,
            **common,
        )
    gated = dict(
        eval_capacity_factor=eval_capacity_factor,
        capacity_rounding=capacity_rounding or "ceil",
        kernel_initializer=kernel_initializer,
        **common,
    )
    if router == "experts_choice":
        return ExpertsChoiceRouter(**gated)
    return TopKRouter(
        top_k=top_k,
        batch_priority=batch_priority,
        importance_loss_weight=importance_loss_weight,
        load_loss_weight=load_loss_weight,
        **gated,
    )
