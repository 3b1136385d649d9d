"""Member conversions shared by the Hydra image and text classifiers:
building a classifier from member specs, splitting one into its members
and fusing members again (`split_members` / `fuse`)."""

from ensemble_zoo.utils.sublayers import set_trainable


def hydra_from_specs(
    cls, specs, backbone_kwargs, num_classes, mlp, preprocessor=None, **classifier_kwargs
):
    """A Hydra classifier of class `cls` holding the members `specs`
    (`member_weights`' per-member weights: each member's kept heads)."""
    counts = [
        [spec["layers"][layer]["query"][0].shape[1] for spec in specs]
        for layer in range(len(specs[0]["layers"]))
    ]
    backbone = cls.backbone_cls(
        num_members=len(specs), member_num_heads=counts, mlp=mlp, **backbone_kwargs
    )
    model = cls(backbone, num_classes, preprocessor=preprocessor, **classifier_kwargs)
    cls.load_specs(model, specs)
    return model


def hydra_backbone_kwargs(task):
    """The backbone arguments of a Hydra classifier `task` other than its
    members' (`num_members`, `member_num_heads`, `mlp`)."""
    config = task.backbone.get_config()
    for key in ("name", "trainable", "num_members", "member_num_heads", "mlp"):
        config.pop(key)
    return config


def split_hydra_members(task, trainable_embedding=True):
    """`task.split_members(...)`: the members as separate one-member models
    of `task`'s class, each keeping only its own heads (structurally), with
    `task`'s preprocessor and classifier arguments
    (`task._classifier_kwargs()`); `trainable_embedding=False` freezes each
    member's embedding (`task._embedding_layers()`)."""
    cls = type(task)
    members = []
    for spec in cls.specs_of(task):
        member = hydra_from_specs(
            cls,
            [spec],
            hydra_backbone_kwargs(task),
            task.num_classes,
            task.backbone.mlp,
            preprocessor=task.preprocessor,
            **task._classifier_kwargs(),
        )
        for layer in member._embedding_layers():
            set_trainable(layer, trainable_embedding)
        members.append(member)
    return members


def fuse_hydra_members(cls, members, mlp="merge"):
    """`cls.fuse(members, mlp)`: one Hydra classifier of class `cls` from
    separately trained ones whose architectures match apart from their
    kept heads; it takes the preprocessor of `members[0]`."""
    members = list(members)
    if not members or not all(isinstance(m, cls) for m in members):
        raise ValueError(f"`members` must be a non-empty list of {cls.__name__}s.")
    first = members[0]
    for i, member in enumerate(members[1:], start=1):
        if (
            hydra_backbone_kwargs(member) != hydra_backbone_kwargs(first)
            or member.num_classes != first.num_classes
            or member._classifier_kwargs() != first._classifier_kwargs()
        ):
            raise ValueError(
                f"members[{i}] has a different architecture from "
                "members[0] (beyond its kept heads)."
            )
    specs = [s for member in members for s in cls.specs_of(member)]
    return hydra_from_specs(
        cls,
        specs,
        hydra_backbone_kwargs(first),
        first.num_classes,
        mlp,
        preprocessor=first.preprocessor,
        **first._classifier_kwargs(),
    )
