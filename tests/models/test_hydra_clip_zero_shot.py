"""Zero-shot CLIP and zero-shot Hydra: the classifier against keras-hub's
CLIP, the members against separately pruned CLIPs (both encoders), and the
circuit search over both encoders."""

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.datasets import digit_captions
from ensemble_zoo.layers.member_selection import single_member
from ensemble_zoo.models.hydra.hydra_model_backbone import head_sites

VOCABULARY = 12
START, END = 10, 11  # CLIP's text pooler reads the largest id: the end token


def tiny_clip(seed=0):
    keras.utils.set_random_seed(seed)
    vision = keras_hub.models.CLIPVisionEncoder(
        patch_size=4, hidden_dim=8, num_layers=2, num_heads=2, intermediate_dim=16,
        image_shape=(8, 8, 1),
    )  # fmt: skip
    text = keras_hub.models.CLIPTextEncoder(
        vocabulary_size=VOCABULARY, embedding_dim=8, hidden_dim=8, num_layers=2, num_heads=4,
        intermediate_dim=16, max_sequence_length=5,
    )  # fmt: skip
    return keras_hub.models.CLIPBackbone(vision, text, projection_dim=8)


# Three classes, two prompts each (start, two words, end, padding).
PROMPTS = np.array(
    [
        [[START, 1, 2, END, 0], [START, 3, 1, END, 0]],
        [[START, 4, 5, END, 0], [START, 3, 4, END, 0]],
        [[START, 6, 7, 8, END], [START, 3, 9, END, 0]],
    ]
)


def images(n, seed=1):
    return np.random.default_rng(seed).uniform(size=(n, 8, 8, 1)).astype("float32")


def reference_logits(clip, x, prompts):
    """CLIP's zero-shot logits in NumPy from keras-hub's own embeddings:
    each prompt normalised, averaged per class, normalised again."""
    v = to_np(clip.get_vision_embeddings(x))
    t = to_np(clip.get_text_embeddings(prompts.reshape(-1, prompts.shape[-1])))
    t = t / np.linalg.norm(t, axis=-1, keepdims=True)
    t = t.reshape(prompts.shape[0], prompts.shape[1], -1).mean(1)
    t = t / np.linalg.norm(t, axis=-1, keepdims=True)
    v = v / np.linalg.norm(v, axis=-1, keepdims=True)
    return np.exp(to_np(clip.clip_head.logit_scale)) * v @ t.T


def pruned_copy(clip, member_masks):
    """A separate CLIP whose pruned heads are removed by zeroing their rows
    of the attention output projection (the paper's ablation)."""
    copy = keras_hub.models.CLIPBackbone.from_config(clip.get_config())
    copy.set_weights(clip.get_weights())
    for (parent, attribute, _, _), keep in zip(head_sites(copy), member_masks, strict=True):
        kernel = getattr(parent, attribute).kernel  # (heads, head_dim, hidden)
        value = to_np(kernel).copy()
        value[np.asarray(keep) == 0] = 0.0
        kernel.assign(value)
    return copy


def test_zero_shot_classifier_equals_clip_and_round_trips(tmp_path):
    clip = tiny_clip()
    model = ez.models.CLIPZeroShotClassifier(clip, PROMPTS)
    x = images(4)
    logits = to_np(model(x))
    np.testing.assert_allclose(logits, reference_logits(clip, x, PROMPTS), atol=1e-5)
    # One prompt per class: keras-hub's CLIP logits themselves.
    one = ez.models.CLIPZeroShotClassifier(clip, PROMPTS[:, 0])
    expected = to_np(clip({"images": x, "token_ids": PROMPTS[:, 0]})["vision_logits"])
    np.testing.assert_allclose(to_np(one(x)), expected, atol=1e-5)
    # Both encoders are the model's weights (saved, copied), not only the
    # vision side its graph runs.
    assert len(model.weights) == len(clip.weights) + 1
    model.save(tmp_path / "zero_shot.keras")
    restored = keras.saving.load_model(tmp_path / "zero_shot.keras")
    np.testing.assert_array_equal(restored.class_token_ids, PROMPTS)
    np.testing.assert_allclose(to_np(restored(x)), logits, atol=1e-6)
    np.testing.assert_allclose(
        restored.class_embedding_kernels()[0], to_np(model.class_embeddings.kernel), atol=1e-6
    )


def test_hydra_members_equal_separately_pruned_clips_in_both_encoders(tmp_path):
    clip = tiny_clip()
    single = ez.models.CLIPZeroShotClassifier(clip, PROMPTS)
    sites = head_sites(clip)
    # The vision encoder's layers first (2 heads), then the text encoder's (4),
    # each first to last.
    assert [heads for _, _, heads, _ in sites] == [2, 2, 4, 4]
    blocks = [*clip.vision_encoder.encoder_layers, *clip.text_encoder.encoder_layers]
    assert [parent for parent, _, _, _ in sites] == [b.attention for b in blocks]
    masks = [
        [[1, 1], [1, 1], [1, 1, 1, 1], [1, 1, 1, 1]],  # every head
        [[1, 0], [1, 1], [1, 1, 1, 1], [0, 1, 1, 0]],  # both encoders
        [[1, 1], [0, 1], [0, 0, 1, 1], [1, 1, 1, 1]],
    ]
    hydra = ez.models.HydraCLIPZeroShotClassifier.from_model(single, masks)
    x = images(5)
    logits = hydra.predict(x, verbose=0)
    assert logits.shape == (5, 3, 3)
    for m, member in enumerate(masks):
        reference = reference_logits(pruned_copy(clip, member), x, PROMPTS)
        np.testing.assert_allclose(logits[:, m], reference, atol=1e-5)
    np.testing.assert_allclose(logits[:, 0], to_np(single(x)), atol=1e-5)
    # The class embeddings are weights: a saved model predicts the same.
    hydra.save(tmp_path / "hydra.keras")
    restored = keras.saving.load_model(tmp_path / "hydra.keras")
    assert isinstance(restored, ez.models.HydraCLIPZeroShotClassifier)
    np.testing.assert_allclose(restored.predict(x, verbose=0), logits, atol=1e-6)
    # Optional fine-tuning trains the vision side and the class embeddings;
    # the text encoder, outside the pass, stays.
    text = [to_np(w).copy() for w in restored.model.backbone.text_encoder.weights]
    heads = to_np(restored.heads[-1].kernel).copy()
    restored.compile(optimizer=keras.optimizers.SGD(0.1))
    restored.fit(x, np.arange(5) % 3, epochs=1, verbose=0)
    assert np.abs(to_np(restored.heads[-1].kernel) - heads).max() > 0
    for before, w in zip(text, restored.model.backbone.text_encoder.weights, strict=True):
        np.testing.assert_array_equal(to_np(w), before)


def test_members_that_prune_text_heads_only_share_one_vision_pass(monkeypatch):
    """Every member keeps every vision head: the vision encoder runs once,
    on one copy of the batch, and is tiled into members after it; the
    members still equal the separately pruned CLIPs. Members that differ
    in the last vision layer: the call walks into the vision encoder, whose
    embedding still runs on one copy."""
    clip = tiny_clip()
    single = ez.models.CLIPZeroShotClassifier(clip, PROMPTS)
    x = images(4)
    text_only = [
        [[1, 1], [1, 1], [1, 1, 1, 1], [0, 1, 1, 0]],
        [[1, 1], [1, 1], [1, 0, 1, 1], [1, 1, 1, 1]],
    ]
    last_vision = [
        [[1, 1], [1, 0], [1, 1, 1, 1], [1, 1, 1, 1]],
        [[1, 1], [0, 1], [1, 1, 1, 1], [1, 1, 1, 1]],
    ]
    for masks, counted in ((text_only, "encoder"), (last_vision, "embedding")):
        hydra = ez.models.HydraCLIPZeroShotClassifier.from_model(single, masks)
        (vision,) = [
            layer
            for layer in hydra.backbone.network.layers
            if isinstance(layer, type(clip.vision_encoder))
        ]
        layer = vision if counted == "encoder" else vision.embedding
        rows, call = [], layer.call

        def counting(inputs, *args, call=call, rows=rows, **kwargs):
            rows.extend(t.shape[0] for t in keras.tree.flatten(inputs))
            return call(inputs, *args, **kwargs)

        monkeypatch.setattr(layer, "call", counting)
        hydra.backbone(np.tile(x, (2, 1, 1, 1)))  # member-major rows of 2 members
        assert rows == [4], counted  # one copy of the batch, not the members' 8 rows
        monkeypatch.undo()
        check_members(hydra, clip, masks, x)


def check_members(hydra, clip, masks, x):
    """Each member equals the CLIP with its heads pruned separately, in the
    tiled pass and alone (`single_member`, the sequential member passes)."""
    logits = hydra.predict(x, verbose=0)
    for m, member in enumerate(masks):
        reference = reference_logits(pruned_copy(clip, member), x, PROMPTS)
        np.testing.assert_allclose(logits[:, m], reference, atol=1e-5)
        with single_member(m):
            alone = to_np(hydra.backbone(x))
        np.testing.assert_allclose(alone, reference, atol=1e-5)


def test_circuit_search_scores_heads_of_both_encoders():
    """The ablation score of a text head is the accuracy of the CLIP with
    that head removed (its class embeddings recomputed), and the ranking
    runs over layers of different head counts."""
    clip = tiny_clip(seed=3)
    single = ez.models.CLIPZeroShotClassifier(clip, PROMPTS)
    full = ez.models.HydraCLIPZeroShotClassifier.from_model(single)
    x, y = images(40, seed=2), np.arange(40) % 3
    score = ez.pruning.head_ablation_scorer(full, (x, y), criterion="accuracy")
    counts = [layer.num_heads for layer in full.head_mask_layers]
    assert counts == [2, 2, 4, 4]
    for layer, head in [(3, 1), (0, 0)]:
        mask = np.zeros((4, 4), "float32")
        for i, count in enumerate(counts):
            mask[i, :count] = 1.0
        mask[layer, head] = 0.0
        member = [row[:count].astype(int).tolist() for row, count in zip(mask, counts)]
        expected = reference_logits(pruned_copy(clip, member), x, PROMPTS).argmax(1)
        assert score(mask) == pytest.approx(np.mean(expected == y), abs=1e-9)
    ranking = ez.pruning.circuit_head_ranking(score, 4, counts, 2)
    assert len(ranking) == 2 and all(h < counts[l] for l, h in ranking)
    masks = ez.pruning.masks_from_rankings([ranking, ranking[::-1]], 4, counts, 1)
    assert [len(layer) for layer in masks[0]] == counts
    assert sum(map(sum, masks[0])) == sum(counts) - 1


def test_zero_shot_classifiers_refuse_bad_input():
    clip = tiny_clip()
    with pytest.raises(TypeError, match="CLIPBackbone"):
        ez.models.CLIPZeroShotClassifier(clip.vision_encoder, PROMPTS)
    with pytest.raises(ValueError, match="vocabulary"):
        ez.models.CLIPZeroShotClassifier(clip, PROMPTS + VOCABULARY)
    with pytest.raises(ValueError, match="at most 5"):
        ez.models.CLIPZeroShotClassifier(clip, np.ones((3, 1, 6), int))
    with pytest.raises(ValueError, match="integer token ids"):
        ez.models.CLIPZeroShotClassifier(clip, PROMPTS.astype("float32"))
    vit = keras_hub.models.ViTImageClassifier(
        backbone=keras_hub.models.ViTBackbone(
            image_shape=(8, 8, 1), patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16
        ),  # fmt: skip
        num_classes=3,
        preprocessor=None,
    )
    with pytest.raises(TypeError, match="CLIPZeroShotClassifier"):
        ez.models.HydraCLIPZeroShotClassifier.from_model(vit)
    single = ez.models.CLIPZeroShotClassifier(clip, PROMPTS)
    with pytest.raises(ValueError, match="reuse_head"):
        ez.models.HydraCLIPZeroShotClassifier.from_model(single, reuse_head=False)


def test_class_prompts_are_keras_hubs_clip_preprocessing():
    preprocessor = digit_captions.caption_preprocessor()
    ids = ez.models.class_prompt_token_ids(
        preprocessor, ["seven", "two"], ["A photo of a {}.", "the digit {}."]
    )
    assert ids.shape == (2, 2, digit_captions.SEQUENCE_LENGTH)
    expected = preprocessor({"images": None, "prompts": ["a photo of a two.", "the digit two."]})
    np.testing.assert_array_equal(ids[1], to_np(expected["token_ids"]))
    vocabulary, _ = digit_captions.caption_vocabulary()
    assert ids.max() == vocabulary["<|endoftext|>"] == len(vocabulary) - 1
    with pytest.raises(ValueError, match="longer than"):
        ez.models.class_prompt_token_ids(preprocessor, ["seven"], ["a photo of a {} a photo of a"])
    with pytest.raises(ValueError, match=r"one `\{\}`"):
        ez.models.class_prompt_token_ids(preprocessor, ["seven"], ["a photo"])
    with pytest.raises(TypeError, match="CLIPPreprocessor"):
        ez.models.class_prompt_token_ids(preprocessor.tokenizer, ["seven"])
