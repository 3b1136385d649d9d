"""Rebuilds the `clip_zero_shot_tiny_digits` and
`hydra_clip_zero_shot_tiny_digits` presets, and the zero-shot table
`benchmarks/results/hydra_clip_zero_shot_digits.txt` (the Hydra paper's
Table 3 columns on the bundled digits).

1. A small CLIP (keras-hub's `CLIPBackbone`: a 3-layer vision encoder on
   the 8x8 digits, patches of 2, and a 2-layer text encoder, 4 heads each)
   trained contrastively from seed 0 on the training images of the
   in-distribution digits 0-7 with captions that name them
   (`ez.datasets.digit_captions`: a template drawn per image and epoch),
   AdamW (150 epochs, batch 64, learning rate 1e-3 after 10 warm-up
   epochs, cosine), one-pixel random translations. The contrastive targets are soft:
   an image's caption targets are every caption of its class in the batch,
   equally (a batch holds each class many times).
2. The single zero-shot classifier of the classes 0-7 with the Hydra
   paper's prompt, "a photo of a {label}." (`CLIPZeroShotClassifier`).
3. Zero-shot Hydra: circuit search over the heads of both encoders
   jointly (12 vision + 8 text heads), one ranking per criterion of the
   paper (accuracy, OOD AUROC, their average), each member pruning its
   ranking's first k heads (`HydraCLIPZeroShotClassifier`), k in 1 ..
   `--max-prune` chosen by validation NLL; no training. The ID score
   uses the validation split, the OOD one the
   validation images with shuffled pixels (in no test split).
4. Temperature scaling of both, fitted on the validation split.

Run from the repository root (about 3 minutes on 2 CPU cores under JAX):

    KERAS_BACKEND=jax python presets/make_clip_zero_shot_tiny_digits.py

The same CLIP with ViT-B/32's head counts (12 per vision layer, 8 per
text layer; heads of 4 and 6 dimensions), whose table is
`benchmarks/results/hydra_clip_zero_shot_digits_12_8_heads.txt` (its
presets are not shipped):

    KERAS_BACKEND=jax python presets/make_clip_zero_shot_tiny_digits.py \
        --vision-heads 12 --text-heads 8 --max-prune 6 --output /tmp/clip_12_8 \
        --table benchmarks/results/hydra_clip_zero_shot_digits_12_8_heads.txt
"""

import argparse
import os

import keras
import keras_hub
import numpy as np
from make_hydra_vit_tiny_digits import ood_validation
from make_vit_tiny_digits import test_metrics

import ensemble_zoo as ez
from ensemble_zoo.datasets import digit_captions

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SINGLE = "clip_zero_shot_tiny_digits"
HYDRA = "hydra_clip_zero_shot_tiny_digits"
CLASSES = ez.datasets.digits.IN_DISTRIBUTION_CLASSES
CRITERIA = ("accuracy", "ood", "average")


def make_clip(seed, vision_heads=4, text_heads=4):
    keras.utils.set_random_seed(seed)
    vocabulary, _ = digit_captions.caption_vocabulary()
    vision = keras_hub.models.CLIPVisionEncoder(
        patch_size=2,
        hidden_dim=48,
        num_layers=3,
        num_heads=vision_heads,
        intermediate_dim=96,
        image_shape=(8, 8, 1),
        name="vision_encoder",
    )
    text = keras_hub.models.CLIPTextEncoder(
        vocabulary_size=len(vocabulary),
        embedding_dim=48,
        hidden_dim=48,
        num_layers=2,
        num_heads=text_heads,
        intermediate_dim=96,
        max_sequence_length=digit_captions.SEQUENCE_LENGTH,
        name="text_encoder",
    )
    clip = keras_hub.models.CLIPBackbone(vision, text, projection_dim=32, name="clip")
    # keras-hub 0.32's `CLIPVisionEmbedding` starts its `position_ids` (a
    # non-trainable weight that its converted checkpoints hold) at zeros:
    # a CLIP built from scratch gives every patch position 0's embedding and
    # cannot tell where a patch is (trained so, 0.69 validation accuracy).
    # The preset's weights carry the positions 0, 1, ...
    embedding = vision.embedding
    embedding.position_ids.assign(np.arange(embedding.num_positions)[None])
    return clip


class CaptionedBatches(keras.utils.PyDataset):
    """Shuffled batches of (images, captions) with soft contrastive targets;
    a new caption template and translation per image and epoch."""

    def __init__(self, batch_size, seed):
        super().__init__()
        self.images, self.labels = ez.datasets.load_arrays("digits", "train")
        self.text = digit_captions.caption_preprocessor()
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.on_epoch_end()

    def on_epoch_end(self):
        self.order = self.rng.permutation(len(self.labels))
        self.templates = self.rng.integers(len(digit_captions.TEMPLATES), size=len(self.labels))
        self.shifts = self.rng.integers(-1, 2, size=(len(self.labels), 2))

    def __len__(self):
        return int(np.ceil(len(self.labels) / self.batch_size))

    def __getitem__(self, index):
        rows = self.order[index * self.batch_size : (index + 1) * self.batch_size]
        images = np.stack(
            [np.roll(self.images[i], tuple(self.shifts[i]), axis=(0, 1)) for i in rows]
        )
        labels = self.labels[rows]
        captions = [
            digit_captions.TEMPLATES[self.templates[i]].format(
                digit_captions.CLASS_NAMES[self.labels[i]]
            )
            for i in rows
        ]
        ids = np.asarray(self.text({"images": None, "prompts": captions})["token_ids"])
        same = (labels[:, None] == labels[None, :]).astype("float32")
        targets = same / same.sum(1, keepdims=True)
        return {"images": images, "token_ids": ids}, {
            "vision_logits": targets,
            "text_logits": targets,
        }


def train_clip(args):
    clip = make_clip(args.seed, args.vision_heads, args.text_heads)
    batches = CaptionedBatches(args.batch_size, args.seed)
    steps = args.epochs * len(batches)
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)
    clip.compile(
        optimizer=keras.optimizers.AdamW(
            keras.optimizers.schedules.CosineDecay(
                args.learning_rate / 10,
                steps,
                warmup_target=args.learning_rate,
                warmup_steps=10 * len(batches),
            ),
            weight_decay=0.05,
        ),
        loss={"vision_logits": loss, "text_logits": loss},
        jit_compile=keras.config.backend() != "torch",
    )
    clip.fit(batches, epochs=args.epochs, verbose=0)
    return clip


def zero_shot(clip):
    text = digit_captions.caption_preprocessor()
    names = [digit_captions.CLASS_NAMES[c] for c in CLASSES]
    return ez.models.CLIPZeroShotClassifier.from_class_names(
        clip, text, names, digit_captions.TEMPLATES[:1], name="member_0"
    )


def circuit_masks(single, max_prune):
    """The members' masks: one circuit ranking per criterion over both
    encoders, each member pruning its first `k` heads, with `k` in 1 ..
    `max_prune` the one of the lowest validation NLL (greedy rankings of a
    smaller budget are prefixes of a larger one's)."""
    x_val, y_val = ez.datasets.load_arrays("digits", "validation")
    ood = ood_validation(x_val)
    full = ez.models.HydraCLIPZeroShotClassifier.from_model(single)
    counts = [layer.num_heads for layer in full.head_mask_layers]
    rankings = []
    for criterion in CRITERIA:
        score = ez.pruning.head_ablation_scorer(full, (x_val, y_val), ood, criterion)
        rankings.append(
            ez.pruning.circuit_head_ranking(score, len(counts), counts, max_prune, progress=True)
        )
        print(criterion, "removes", rankings[-1])
    best = None
    for prune in range(1, max_prune + 1):
        masks = ez.pruning.masks_from_rankings(rankings, len(counts), counts, prune)
        # Lists, not an array: the encoders' head counts may differ.
        masks = [[[int(v) for v in np.asarray(layer)] for layer in member] for member in masks]
        hydra = ez.models.HydraCLIPZeroShotClassifier.from_model(single, masks)
        probs = ez.calibration.TemperatureScaling().predict_probabilities(
            hydra.predict(x_val, verbose=0)
        )
        nll = ez.metrics.negative_log_likelihood(probs, y_val)
        print(f"pruning {prune} heads: validation NLL {nll:.4f}")
        if best is None or nll < best[0]:
            best = (nll, prune, masks)
    return best[1], best[2]


def table_row(name, logits, temperature=None):
    """The Table 3 columns on the test split (OOD: the near-OOD digits 8
    and 9, and far-OOD photo patches; MSP as the OOD score)."""
    scaler = ez.calibration.TemperatureScaling(temperature or 1.0)

    def probs(split):
        return scaler.predict_probabilities(logits[split])

    y = ez.datasets.load_arrays("digits", "test")[1]
    p = probs("test")
    row = {
        "system": name,
        "acc": ez.metrics.accuracy(p, y),
        "brier": ez.metrics.brier_score(p, y),
        "nll": ez.metrics.negative_log_likelihood(p, y),
        "ece": ez.metrics.expected_calibration_error(p, y),
        "aece": ez.metrics.adaptive_calibration_error(p, y),
    }
    for split in ("near_ood", "far_ood"):
        q = probs(split)
        ind, out = 1 - p.max(1), 1 - q.max(1)
        tag = "near" if split == "near_ood" else "far"
        row[f"{tag}_auroc"] = ez.metrics.ood_auroc(ind, out)
        row[f"{tag}_fpr95"] = ez.metrics.fpr_at_95_tpr(ind, out)
        row[f"{tag}_aupr"] = ez.metrics.ood_aupr(ind, out)
    return row


def member_logits(model):
    out = {}
    for split in ("validation", "test", "near_ood", "far_ood"):
        raw = getattr(model, "preprocessor", None) is not None
        x = ez.datasets.load_arrays("digits", split, raw=raw)[0]
        logits = np.asarray(model.predict(x, batch_size=256, verbose=0))
        out[split] = logits if logits.ndim == 3 else logits[:, None]
    return out


def fitted_temperature(logits):
    y = ez.datasets.load_arrays("digits", "validation")[1]
    return ez.calibration.TemperatureScaling().fit(logits["validation"], y).temperature


def write_table(path, rows, prune, masks):
    lines = [
        "Zero-shot Hydra on the digits CLIP (the Hydra paper's Table 3 columns)",
        f"backend {keras.config.backend()}, {os.cpu_count()} CPU cores; "
        f"script presets/make_clip_zero_shot_tiny_digits.py; members prune {prune} of "
        f"{sum(len(layer) for layer in masks[0])} heads",
        "test split of digits 0-7; OOD by MSP: near = digits 8-9, far = photo patches",
        "",
        "| system | acc | Brier | NLL | ECE | aECE | near AUROC | near FPR95 | near AUPR "
        "| far AUROC | far FPR95 | far AUPR |",
        "|---|" + "---|" * 11,
    ]
    keys = ["acc", "brier", "nll", "ece", "aece"] + [
        f"{t}_{m}" for t in ("near", "far") for m in ("auroc", "fpr95", "aupr")
    ]
    for row in rows:
        lines.append(f"| {row['system']} | " + " | ".join(f"{row[k]:.4f}" for k in keys) + " |")
    lines += ["", f"member head masks (vision layers, then text layers): {masks}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--max-prune", type=int, default=4, help="most heads a member prunes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vision-heads", type=int, default=4, help="heads per vision layer")
    parser.add_argument("--text-heads", type=int, default=4, help="heads per text layer")
    parser.add_argument(
        "--table",
        default=os.path.join(ROOT, "benchmarks", "results", "hydra_clip_zero_shot_digits.txt"),
        help="where the table goes",
    )
    parser.add_argument("--output", default=HERE)
    args = parser.parse_args()

    clip = train_clip(args)
    single = zero_shot(clip)
    prune, masks = circuit_masks(single, args.max_prune)
    hydra = ez.models.HydraCLIPZeroShotClassifier.from_model(
        single, masks, preprocessor=ez.datasets.image_preprocessor("digits"), name=HYDRA
    )
    ensemble = ez.models.DeepEnsembleClassifier(
        [single], preprocessor=ez.datasets.image_preprocessor("digits"), name=SINGLE
    )

    logits = {"single": member_logits(single), "hydra": member_logits(hydra)}
    circ_avg = {k: v[:, 2:3] for k, v in logits["hydra"].items()}
    rows = [
        table_row("single", logits["single"]),
        table_row("single + temperature", logits["single"], fitted_temperature(logits["single"])),
        table_row("CircAvg (one pruned member)", circ_avg),
        table_row("Hydra (Circ), 3 members", logits["hydra"]),
        table_row("Hydra + temperature", logits["hydra"], fitted_temperature(logits["hydra"])),
    ]
    # Their time, in alternation: benchmarks/zero_shot_hydra.py.
    write_table(args.table, rows, prune, masks)

    recipe = (
        f"CLIP trained contrastively from seed {args.seed}: {args.epochs} epochs, batch "
        f"{args.batch_size}, AdamW lr {args.learning_rate} (10 warm-up epochs from a tenth, "
        "then cosine), weight decay 0.05, "
        "+-1 pixel translations, captions from ez.datasets.digit_captions; zero-shot prompt "
        f"'{digit_captions.TEMPLATES[0]}'; backend {keras.config.backend()}"
    )
    for name, model, extra in (
        (SINGLE, ensemble, {"method": "clip zero-shot"}),
        (
            HYDRA,
            hydra,
            {"method": "hydra (circuit, zero-shot)", "base_preset": SINGLE, "head_masks": masks},
        ),
    ):
        model.save_to_preset(
            os.path.join(args.output, name),
            metadata={
                "dataset": "digits",
                "description": ez.presets.PRESETS[name]["description"],
                "training": recipe
                + (
                    f"; members prune {prune} heads of both encoders by circuit search"
                    " (accuracy, OOD, average), no training"
                    if model is hydra
                    else ""
                ),
                "script": "presets/make_clip_zero_shot_tiny_digits.py",
                "metrics": test_metrics(model),
                **extra,
            },
        )
        print(name, ez.presets.preset_metadata(os.path.join(args.output, name))["metrics"])


if __name__ == "__main__":
    main()
