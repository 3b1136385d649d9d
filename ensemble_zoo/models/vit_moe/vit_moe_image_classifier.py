import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.keras_hub_vit import check_keras_hub_classifier
from ensemble_zoo.models.member_axis import check_backbone_class
from ensemble_zoo.models.member_axis import member_axis_config
from ensemble_zoo.models.member_axis import member_axis_logits
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS
from ensemble_zoo.models.vit_moe.vit_moe_backbone import ViTMoEBackbone
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate

#: The `ViTMoEBackbone` MoE options that `from_vmoe_checkpoint` takes (with
#: vmoe's defaults) and passes on; `num_slots` comes from the checkpoint.


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class ViTMoEImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """V-MoE and E³ image classifiers ("Sparse MoEs meet Efficient Ensembles").

    A `ViTMoEBackbone`, class-token (or average) pooling, optionally a
    `tanh` pre-logits layer (keras-hub's `intermediate_dim`, vit_jax's
    `representation_size`), and one linear head shared by the members (E³
    shares every non-expert weight).
    `call` returns member logits `(batch, members, classes)`; V-MoE
    (`ensemble_size == 1`) is a one-member ensemble. `fit` minimizes the
    mean of the members' cross-entropies (the paper's E³ loss) plus the
    routers' auxiliary losses (in `model.losses`); predictions average the
    members' probabilities (`predict_uncertainty`).

    Build one by upcycling a dense keras-hub ViT with `from_keras_hub`
    (every expert starts as a copy of its block's MLP), and turn a V-MoE
    into an E³ with the same weights with `from_vmoe` (no new parameters).
    `from_vmoe_checkpoint` reads the checkpoints released with the papers
    (vmoe's Flax format) on every backend.

    Args:
        backbone: a `ViTMoEBackbone`.
        num_classes: int.
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`
            run on raw images by `fit`, `predict` and `evaluate`.
        pooling: `"token"` (class token, default) or `"gap"`.
        intermediate_dim: int or `None`. If set, a `Dense(intermediate_dim,
            activation="tanh")` layer named `pre_logits` runs between the
            pooling and the head, as in keras-hub's `ViTImageClassifier`.
            Defaults to `None`.
        dropout: float, dropout before the head. Defaults to 0.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    # Upcycle: MoE in blocks 1 and 3, 4 experts, each a copy of the MLP.
    vmoe = ez.models.ViTMoEImageClassifier.from_keras_hub(
        vit, num_experts=4, num_selected_experts=2, moe_layers=[1, 3]
    )
    # E3 from the same weights: 2 members, each routing to its own 2 experts.
    e3 = ez.models.ViTMoEImageClassifier.from_vmoe(
        vmoe, ensemble_size=2, num_selected_experts=1
    )
    x, _ = ez.datasets.load_arrays("digits", "test")
    e3.predict(x[:5], verbose=0).shape  # (5, 2, 8)
    ```
    """

    backbone_cls = ViTMoEBackbone

    def __init__(
        self,
        backbone,
        num_classes,
        preprocessor=None,
        pooling="token",
        dropout=0.0,
        intermediate_dim=None,
        **kwargs,
    ):
        check_backbone_class(backbone, ViTMoEBackbone)
        num_classes = check_positive_int(num_classes, "num_classes")
        pooling = check_pooling(pooling)
        dropout = check_rate(dropout, "dropout")
        if intermediate_dim is not None:
            intermediate_dim = check_positive_int(intermediate_dim, "intermediate_dim")
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        pre_logits = None
        if intermediate_dim is not None:
            self.intermediate_layer = pre_logits = keras.layers.Dense(
                intermediate_dim, activation="tanh", dtype=backbone.dtype_policy, name="pre_logits"
            )
        # One head shared by the members (E³ shares every non-expert weight).
        self.output_dropout, self.head = task_head(
            backbone, dropout, keras.layers.Dense, num_classes
        )

        # === Functional Model ===
        inputs = backbone.input
        outputs = member_axis_logits(
            backbone, inputs, pooling, self.output_dropout, self.head, pre_logits
        )
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.num_members = backbone.num_members
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout
        self.intermediate_dim = intermediate_dim

    def get_config(self):
        config = {**super().get_config(), **member_axis_config(self)}
        config["intermediate_dim"] = self.intermediate_dim
        return config

    # === Conversions ===

    @classmethod
    def _with_head_of(cls, classifier, backbone, **kwargs):
        """A classifier on `backbone` with the class count, pooling,
        dropout and `intermediate_dim` of `classifier` (ours or a keras-hub
        `ViTImageClassifier`)."""
        return cls(
            backbone,
            classifier.num_classes,
            pooling=classifier.pooling,
            dropout=classifier.dropout,
            intermediate_dim=classifier.intermediate_dim,
            **kwargs,
        )

    @classmethod
    def from_keras_hub(
        cls,
        classifier,
        num_experts,
        num_selected_experts=1,
        moe_layers=None,
        ensemble_size=1,
        expert_noise=0.0,
        **backbone_kwargs,
    ):
        """Upcycles a dense keras-hub `ViTImageClassifier` into V-MoE / E³.

        Every weight is copied; in the MoE blocks every expert is a copy of
        the block's dense MLP and the router is freshly initialized (as in
        sparse upcycling). With `num_selected_experts = num_experts /
        ensemble_size` and enough capacity the gates of a token sum to 1, so
        the upcycled model computes exactly the dense ViT (tested); with
        fewer experts per token the MoE output is scaled by the chosen
        gates until fine-tuning.

        Args:
            classifier: a `keras_hub.models.ViTImageClassifier` (its
                `pre_logits` layer, if any, is copied too).
            num_experts: int, E.
            num_selected_experts: int, K. Defaults to 1.
            moe_layers: MoE block indices; defaults to the last two odd
                blocks.
            ensemble_size: int, M. Defaults to 1 (V-MoE).
            expert_noise: float >= 0. Each expert's kernels get Gaussian
                noise of `expert_noise` times the dense kernel's standard
                deviation (seeded by `seed`), so identical copies start to
                differ; 0 (default) copies exactly. The paper (App. H.2)
                finds no clear gain from noisy expert initialization at
                scale; on a small upcycled model it lets E³ members diverge
                sooner.
            **backbone_kwargs: other `ViTMoEBackbone` arguments (capacity
                factors, `group_size`, `batch_priority`, `noise_std`,
                `seed`, dropout rates).
        """
        import keras_hub

        check_keras_hub_classifier(classifier, keras_hub.models.ViTImageClassifier)
        if getattr(classifier, "activation", None) is not None:
            raise ValueError(
                "`classifier` has an output activation "
                f"({classifier.activation!r}); the zoo's heads return logits."
            )
        vit = classifier.backbone
        architecture = {name: getattr(vit, name) for name in VIT_ARGUMENTS}
        for name in ("dropout_rate", "attention_dropout"):  # backbone_kwargs may override
            backbone_kwargs.setdefault(name, architecture.pop(name))
        backbone = ViTMoEBackbone(
            num_experts=num_experts,
            num_selected_experts=num_selected_experts,
            moe_layers=moe_layers,
            ensemble_size=ensemble_size,
            **architecture,
            **backbone_kwargs,
        )
        if not expert_noise >= 0:
            raise ValueError(f"`expert_noise` must be >= 0; got {expert_noise!r}.")
        upcycle_backbone(vit, backbone, expert_noise, backbone_kwargs.get("seed"))
        model = cls._with_head_of(classifier, backbone, preprocessor=classifier.preprocessor)
        if classifier.intermediate_dim is not None:
            model.intermediate_layer.set_weights(classifier.intermediate_layer.get_weights())
        model.head.set_weights(classifier.output_dense.get_weights())
        return model

    @classmethod
    def from_vmoe_checkpoint(
        cls,
        path,
        *,
        num_selected_experts=None,
        router=None,
        capacity_rounding=None,
        group_size=None,
        capacity_factor=1.5,
        eval_capacity_factor=None,
        capacity_multiple_of=4,
        batch_priority=False,
        bfloat16_dispatch=True,
        mlp_activation="gelu_approximate",
        noise_std=None,
        importance_loss_weight=0.005,
        load_loss_weight=0.005,
        ensemble_size=None,
        image_shape=None,
        preprocessor="vmoe",
        pooling=None,
        **backbone_kwargs,
    ):
        """Loads a V-MoE / E³ checkpoint released with the E³ paper.

        Reads google-research/vmoe's Flax checkpoint format (`<prefix>.index`
        plus `<prefix>.data-NNNNN-of-MMMMM`, MessagePack; our own reader,
        no jax / flax / TensorFlow needed) on every backend. The
        architecture comes from the parameter shapes; the routing settings
        live in vmoe's configs, not in the files, so they are arguments
        here, with **vmoe's defaults** (which differ from the zoo's):

        - `mlp_activation="gelu_approximate"`: vit_jax's `nn.gelu` is the
          tanh approximation (keras-hub's ViT uses the exact GELU);
        - `capacity_multiple_of=4`: vmoe rounds every capacity up to a
          multiple of 4 (`compute_capacity`);
        - `bfloat16_dispatch=True`: every paper config rounds expert inputs
          and outputs to bfloat16 (`Bfloat16Dispatcher`);
        - combine weights are the softmax gates, not renormalised over the
          top-K, and buffers fill K-major (all top-1 choices first), as
          the zoo's router always does;
        - `noise_std=None` is vmoe's effective training noise,
          `ensemble_size / num_experts` for the top-K router (vmoe scales
          its `noise_std=1.0` by 1 / experts-per-member; the E³ paper
          writes 1 / E), `1 / num_experts` for Experts Choice and 0 for
          Soft MoE (vmoe's defaults);
        - `importance_loss_weight = load_loss_weight = 0.005`, the paper
          configs' weights (vmoe's class defaults are 1.0).

        With the same `group_size`, `num_selected_experts`, capacity factor
        and `batch_priority` as the vmoe config, and
        `bfloat16_dispatch=False`, the logits equal vmoe's float32-dispatch
        logits to float32 round-off (tested to 1e-5 on checkpoints written
        by vmoe's own code, `tests/fixtures/vmoe/`). With bfloat16 dispatch
        (vmoe's default) each MoE layer matches vmoe's on the same input up
        to one bfloat16 step per expert output; a step that rounds the
        other way moves the logits by up to ~2e-3, so end-to-end logits
        are not guaranteed to round-off (see `vmoe_checkpoint`). E³ logits come out as the zoo's
        `(batch, members, classes)`; vmoe's rows `b * M + m` are
        `logits[b, m]`.

        Args:
            path: the checkpoint prefix (e.g. `.../eee_s32_last2_ilsvrc2012_ft_cifar100`
                for `....index` and `....data-00000-of-00001`), its `.index`
                file, or a directory holding exactly one `.index` file.
            num_selected_experts: int, K (vmoe's `num_selected_experts`:
                2 for the V-MoE paper's models, 1 for E³). Required for the
                top-K router; `None` or 1 for the others.
            router: `None`, `"top_k"`, `"experts_choice"` or `"soft"`.
                A checkpoint with `Moe/Router/mu` and `Moe/Router/scale`
                is Soft MoE (vmoe's `SoftRouter`), its slots per expert
                read from `mu` `(dim, E, slots)`. A `Moe/Router/dense/kernel`
                belongs to the top-K router or to Experts Choice
                (`NoisyTopItemsPerExpertRouter`), which the files cannot
                tell apart: `None` (default) reads it as top-K, and
                `"experts_choice"` loads it with Experts Choice routing.
                vmoe's Experts Choice configs (`soft_moe/configs`) use
                `capacity_factor=1.0`, `capacity_multiple_of=1` and
                `capacity_rounding="round"`.
            capacity_rounding: `None` (the router's vmoe default: `"ceil"`,
                or `"round"` for Soft MoE), `"ceil"` or `"round"`, vmoe's
                `capacity_ceil_or_round`.
            group_size: int or `None`, tokens per routing group **per
                member**: vmoe's `group_size` divided by the ensemble size
                (vmoe's E³ groups hold all members' copies, and members
                never share experts, so this routes identically). `None`
                routes each image as one group (vmoe's configs use the
                tokens of 8 images).
            capacity_factor: float, training capacity factor. Defaults to
                1.5 (vmoe's fine-tuning configs; pre-training used 1.05).
            eval_capacity_factor: float or `None`, capacity factor at
                inference; `None` uses `capacity_factor`.
            capacity_multiple_of: int. Defaults to 4 (vmoe).
            batch_priority: bool, Batch-Prioritized Routing. Defaults to
                `False` (vmoe's configs).
            bfloat16_dispatch: bool. Defaults to `True` (vmoe's configs).
            mlp_activation: `"gelu_approximate"` (default, vmoe) or `"gelu"`.
            noise_std: float or `None` (see above).
            importance_loss_weight: float. Defaults to 0.005.
            load_loss_weight: float. Defaults to 0.005.
            ensemble_size: int or `None`. E³ checkpoints store the router
                kernel `(dim, M, E/M)` and give M; a `(dim, E)` kernel
                (V-MoE, or the pre-trained E³ checkpoint before its
                fine-tuning reshape) gives 1 unless set here.
            image_shape: `(height, width, 3)` or `None` (the square image
                the position embedding was trained for).
            preprocessor: `"vmoe"` (default) attaches a keras-hub
                `ViTImageClassifierPreprocessor` that resizes images to
                `image_shape` and maps `[0, 255]` to `[-1, 1]` (vmoe's
                `value_range(-1, 1)`), so `predict` takes raw images;
                `None` for none, or a preprocessor.
            pooling: `None` (default) reads it from the checkpoint: the
                class token when it has one (vmoe's `classifier='token'`),
                else the mean of the patch tokens (`'gap'`); `"token"` on
                a checkpoint without a class token reads the first patch
                token (vmoe's `classifier='0'`).
            **backbone_kwargs: other `ViTMoEBackbone` arguments (dropout
                rates, `seed`, `dispatcher`).

        Returns:
            A `ViTMoEImageClassifier`.

        Example:

        ```python
        import numpy as np
        from ensemble_zoo.models import ViTMoEImageClassifier

        # A released E3 checkpoint (gs://vmoe_checkpoints/, downloaded):
        # e3 = ViTMoEImageClassifier.from_vmoe_checkpoint(
        #     "eee_s32_last2_ilsvrc2012_ft_cifar100",
        #     num_selected_experts=1, group_size=8 * 17,
        # )
        e3 = ViTMoEImageClassifier.from_vmoe_checkpoint(
            "tests/fixtures/vmoe/e3_tiny", num_selected_experts=1,
            group_size=34, capacity_factor=1.0,
        )
        images = np.random.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
        e3(images).shape  # (2, 2, 5): batch, members, classes
        ```
        """
        from ensemble_zoo.models.vit_moe import vmoe_checkpoint

        params = vmoe_checkpoint.strip_params_prefix(vmoe_checkpoint.read_vmoe_checkpoint(path))
        architecture, head = vmoe_checkpoint.vmoe_architecture(
            params, image_shape=image_shape, ensemble_size=ensemble_size, pooling=pooling
        )
        router, num_selected_experts = vmoe_checkpoint.resolve_router(
            architecture, router, num_selected_experts
        )
        if noise_std is None and router == "top_k":
            noise_std = architecture["ensemble_size"] / architecture["num_experts"]
        backbone = ViTMoEBackbone(
            **architecture,
            num_selected_experts=num_selected_experts,
            router=router,
            capacity_rounding=capacity_rounding,
            group_size=group_size,
            capacity_factor=capacity_factor,
            eval_capacity_factor=eval_capacity_factor,
            capacity_multiple_of=capacity_multiple_of,
            batch_priority=batch_priority,
            bfloat16_dispatch=bfloat16_dispatch,
            mlp_activation=mlp_activation,
            noise_std=noise_std,
            importance_loss_weight=importance_loss_weight,
            load_loss_weight=load_loss_weight,
            layer_norm_epsilon=1e-6,
            **backbone_kwargs,
        )
        if isinstance(preprocessor, str):
            if preprocessor != "vmoe":
                raise ValueError(
                    "`preprocessor` must be 'vmoe', None or a keras-hub "
                    f"preprocessor; got {preprocessor!r}."
                )
            preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(
                image_converter=keras_hub.layers.ViTImageConverter(
                    image_size=tuple(backbone.image_shape[:2]), scale=1.0 / 127.5, offset=-1.0
                )
            )
        model = cls(backbone, preprocessor=preprocessor, **head)
        vmoe_checkpoint.load_vmoe_params(model, params)
        return model

    @classmethod
    def from_vmoe(cls, model, ensemble_size, num_selected_experts=None, **backbone_overrides):
        """An E³ (or V-MoE) with the weights of `model`, no new parameters.

        The router kernel `(dim, E)` is read as M contiguous row slices
        (member m routes with columns `[m E/M, (m+1) E/M)`), so a V-MoE
        checkpoint fine-tunes directly into E³, as in the paper (App. B.1).

        Args:
            model: a `ViTMoEImageClassifier` (V-MoE or E³).
            ensemble_size: int, the new M; must divide E.
            num_selected_experts: int, the new K. Defaults to the model's
                (it must be at most `E / M`).
            **backbone_overrides: other `ViTMoEBackbone` arguments to
                change (e.g. capacity factors).
        """
        if not isinstance(model, ViTMoEImageClassifier):
            raise ValueError(
                f"`model` must be a ViTMoEImageClassifier; got {type(model).__name__}."
            )
        config = model.backbone.get_config()
        config.pop("name", None)
        config.update(backbone_overrides)
        config["ensemble_size"] = ensemble_size
        if num_selected_experts is not None:
            config["num_selected_experts"] = num_selected_experts
        backbone = ViTMoEBackbone.from_config(config)
        new = cls._with_head_of(model, backbone)
        new.set_weights(model.get_weights())
        return new


def upcycle_backbone(vit, backbone, expert_noise=0.0, seed=None):
    """Copies a keras-hub `ViTBackbone` into a `ViTMoEBackbone`: dense
    blocks one to one, MoE blocks' attention and norms one to one and the
    dense MLP into every expert (kernels plus `expert_noise` times their
    standard deviation of Gaussian noise)."""
    rng = np.random.default_rng(seed)
    backbone.embedding.set_weights(vit.get_layer("vit_patching_and_embedding").get_weights())
    encoder = vit.get_layer("vit_encoder")
    backbone.layer_norm.set_weights(encoder.layer_norm.get_weights())
    experts = backbone.num_experts
    for i, (dense, block) in enumerate(zip(encoder.encoder_layers, backbone.encoder_blocks)):
        if i not in backbone.moe_layers:
            block.set_weights(dense.get_weights())
            continue
        for name in ("layer_norm_1", "mha", "layer_norm_2"):
            getattr(block, name).set_weights(getattr(dense, name).get_weights())
        for source, target in (
            (dense.mlp.dense_1, block.moe.dense_1),
            (dense.mlp.dense_2, block.moe.dense_2),
        ):
            for variable in ("kernel", "bias"):
                if getattr(source, variable, None) is None:
                    continue
                value = np.asarray(ops.convert_to_numpy(getattr(source, variable)))
                value = np.broadcast_to(value, (experts,) + value.shape)
                if expert_noise and variable == "kernel":
                    noise = rng.normal(size=value.shape) * expert_noise * value.std()
                    value = value + noise.astype(value.dtype)
                getattr(target, variable).assign(value)
