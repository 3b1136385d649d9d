"""Member conversions shared by the Hydra image and text classifiers."""

from ensemble_zoo.utils.sublayers import set_trainable


class HydraConversionsMixin:
    """`split_members` / `fuse` for Hydra classifiers.

    A subclass sets `backbone_cls`, `specs_of` (model -> member specs) and
    `load_specs` (writes specs into a built model), and implements
    `_classifier_kwargs()` (constructor arguments besides the backbone and
    `num_classes`) and `_embedding_layers()` (the shared embedding).
    """

    backbone_cls = None
    specs_of = None
    load_specs = None

    @classmethod
    def _from_specs(
        cls, specs, backbone_kwargs, num_classes, mlp, preprocessor=None, **classifier_kwargs
    ):
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

    def _backbone_kwargs(self):
        config = self.backbone.get_config()
        for key in ("name", "trainable", "num_members", "member_num_heads", "mlp"):
            config.pop(key)
        return config

    def split_members(self, trainable_embedding=True):
        """The members as separate one-member models, heads sliced out.

        Member `m` keeps only its own heads (structurally: fewer slots, not
        a mask). With `mlp="merge"` every member gets the shared MLP. Use
        this to fine-tune members separately (the paper's recipe) before
        `fuse`-ing them again. Every member shares this model's
        preprocessor.

        Args:
            trainable_embedding: bool. `False` freezes each member's
                embedding, which `fuse` requires to be equal across members
                (the paper keeps it frozen).
        """
        members = []
        for spec in type(self).specs_of(self):
            member = type(self)._from_specs(
                [spec],
                self._backbone_kwargs(),
                self.num_classes,
                self.backbone.mlp,
                preprocessor=self.preprocessor,
                **self._classifier_kwargs(),
            )
            for layer in member._embedding_layers():
                set_trainable(layer, trainable_embedding)
            members.append(member)
        return members

    @classmethod
    def fuse(cls, members, mlp="merge"):
        """Fuses separately trained members into one Hydra model.

        Args:
            members: list of models of this class (e.g. from
                `split_members()`, then fine-tuned); each may hold several
                members. Their embeddings must be equal (keep them frozen
                while fine-tuning) and their architectures must match apart
                from the kept heads.
            mlp: `"merge"` (the paper's choice: the members' MLP weights
                are averaged, so the fused model equals the members only
                where their MLPs agree) or `"grouped"` (exact: every member
                keeps its own MLP, at `members` x the MLP parameters).

        The fused model takes the preprocessor of `members[0]`.
        """
        members = list(members)
        if not members or not all(isinstance(m, cls) for m in members):
            raise ValueError(f"`members` must be a non-empty list of {cls.__name__}s.")
        first = members[0]
        for i, member in enumerate(members[1:], start=1):
            if (
                member._backbone_kwargs() != first._backbone_kwargs()
                or member.num_classes != first.num_classes
                or member._classifier_kwargs() != first._classifier_kwargs()
            ):
                raise ValueError(
                    f"members[{i}] has a different architecture from "
                    "members[0] (beyond its kept heads)."
                )
        specs = [s for member in members for s in cls.specs_of(member)]
        return cls._from_specs(
            specs,
            first._backbone_kwargs(),
            first.num_classes,
            mlp,
            preprocessor=first.preprocessor,
            **first._classifier_kwargs(),
        )
