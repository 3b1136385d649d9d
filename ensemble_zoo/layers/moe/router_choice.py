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


#: The `SparseMoE` arguments that every router takes as they are.
_SHARED_ARGUMENTS = tuple(
    "num_experts num_members group_size capacity_factor capacity_multiple_of noise_std seed".split()
)

#: The `SparseMoE` arguments that each router takes as they are (the
#: initializer and `capacity_rounding`'s default differ).
_ROUTER_ARGUMENTS = {
    "soft": _SHARED_ARGUMENTS + ("num_slots",),
    "experts_choice": _SHARED_ARGUMENTS + ("eval_capacity_factor",),
    "top_k": _SHARED_ARGUMENTS
    + tuple(
        "eval_capacity_factor top_k batch_priority importance_loss_weight load_loss_weight".split()
    ),
}

#: Every `SparseMoE` argument that some router takes as it is.
ROUTER_ARGUMENTS = tuple(dict.fromkeys(sum(_ROUTER_ARGUMENTS.values(), ())))


def make_router(router, *, capacity_rounding, kernel_initializer, **arguments):
    """The router layer of `SparseMoE(router=...)`; it routes in float32
    under mixed precision (as vmoe).

    Args:
        router: `"top_k"`, `"experts_choice"` or `"soft"`.
        capacity_rounding: `"ceil"`, `"round"` or `None` (the router's
            vmoe default).
        kernel_initializer: the router kernel's (Soft MoE: `mu`'s)
            initializer.
        **arguments: `SparseMoE`'s routing arguments, by its names (at
            least those of `_ROUTER_ARGUMENTS[router]`; the others are
            left out).
    """
    kept = {name: arguments[name] for name in _ROUTER_ARGUMENTS[router]}
    common = dict(dtype="float32", name="router", **kept)
    if router == "soft":
        return SoftRouter(
            capacity_rounding=capacity_rounding or "round",
            mu_initializer=kernel_initializer,
            compute_similarity_metrics=False,
            **common,
        )
    router_cls = ExpertsChoiceRouter if router == "experts_choice" else TopKRouter
    return router_cls(
        capacity_rounding=capacity_rounding or "ceil",
        kernel_initializer=kernel_initializer,
        **common,
    )
