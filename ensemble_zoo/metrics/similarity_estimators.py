"""lm-polygraph 0.7.0's estimators over the pairwise similarities of a
question's sampled answers, as array functions: `DegMat`,
`Eccentricity`, `EigValLaplacian` (Lin et al., "Generating with
Confidence", arXiv:2305.19187), `KernelLanguageEntropy` (Nikitin et al.,
arXiv:2405.20003), `LUQ` (Zhang et al., EMNLP 2024,
2024.emnlp-main.299) and `EigenScore` (Chen et al., "INSIDE",
arXiv:2402.03744).

Every function takes a batch of questions, each with the same number `n`
of sampled answers: a similarity matrix is `(batch, n, n)`, row `i`
column `j` the similarity of answer `i` to answer `j` (an NLI model's
entailment probability, one minus its contradiction probability, or any
score in `[0, 1]`; lm-polygraph's `affinity="entail"` and `"contra"`).
Every function returns a float64 `(batch,)` array, higher for a more
uncertain question, as lm-polygraph's do.
"""

import numpy as np
import scipy.linalg
import scipy.special

from ensemble_zoo.metrics.token_arrays import checked_array
from ensemble_zoo.utils.validation import check_real

#: Eccentricity's eigenvalue threshold (lm-polygraph's default).
ECCENTRICITY_THRESHOLD = 0.9
#: Kernel language entropy's heat-kernel time (lm-polygraph's and the
#: paper's default).
HEAT_KERNEL_TIME = 0.3
#: EigenScore's covariance regulariser (lm-polygraph's default).
EIGENSCORE_ALPHA = 1e-3


def checked_matrices(x, name, low=None, high=None):
    """`x` as a float64 `(batch, n, n)` array of finite values (within
    `[low, high]` where given), or a `ValueError` naming `name`."""
    x = checked_array(x, name, 3)
    if x.shape[1] != x.shape[2] or x.shape[1] == 0:
        raise ValueError(f"`{name}` must be an array (batch, samples, samples); got {x.shape}.")
    if not np.isfinite(x).all():
        raise ValueError(f"`{name}` holds NaN or infinite values.")
    if (low is not None and x.min() < low) or (high is not None and x.max() > high):
        raise ValueError(f"`{name}` must lie in [{low}, {high}]; got [{x.min()}, {x.max()}].")
    return x


def _symmetric(similarity):
    """lm-polygraph's `W = (S + S^T) / 2`."""
    similarity = checked_matrices(similarity, "similarity", 0.0, 1.0)
    return (similarity + np.swapaxes(similarity, 1, 2)) / 2


def _normalized_laplacians(weights):
    """`I - D^-1/2 W D^-1/2` per question, `D` the row sums of `W`."""
    scale = 1.0 / np.sqrt(weights.sum(axis=2))
    n = weights.shape[1]
    return np.eye(n) - scale[:, :, None] * weights * scale[:, None, :]


def degree_matrix(similarity):
    """lm-polygraph's `DegMat`: `trace(n - D) / n^2 = 1 - sum(W) / n^2`,
    one minus the mean pairwise similarity, the diagonal included, of the
    symmetrised `W = (S + S^T) / 2`.

    Args:
        similarity: float array `(batch, n, n)` in `[0, 1]`.

    Returns:
        float64 array `(batch,)`.
    """
    weights = _symmetric(similarity)
    n = weights.shape[1]
    return 1.0 - weights.sum(axis=(1, 2)) / n**2


def eccentricity(similarity, threshold=ECCENTRICITY_THRESHOLD):
    """lm-polygraph's `Eccentricity`: the norm of the answers' offsets
    from their mean in the spectral embedding of the graph Laplacian
    `L = I - D^-1/2 W D^-1/2` (`W` symmetrised as in `degree_matrix`),
    whose coordinates are the eigenvectors of the eigenvalues below
    `threshold`.

    lm-polygraph centres each eigenvector over the answers and returns the
    norm of those norms: the Frobenius norm of the centred embedding, the
    same number as the paper's norm of the answers' eccentricities.

    Args:
        similarity: float array `(batch, n, n)` in `[0, 1]`, each answer
            similar to at least one (a zero row has no Laplacian).
        threshold: float, the eigenvalue cut (lm-polygraph's 0.9).

    Returns:
        float64 array `(batch,)`.
    """
    threshold = check_real(threshold, "threshold")
    laplacians = _normalized_laplacians(_checked_degrees(_symmetric(similarity)))
    values, vectors = np.linalg.eigh(laplacians)
    centred = vectors - vectors.mean(axis=1, keepdims=True)
    kept = values < threshold  # (batch, n) per eigenvector
    return np.sqrt((centred**2 * kept[:, None, :]).sum(axis=(1, 2)))


def laplacian_eigenvalue_sum(similarity):
    """lm-polygraph's `EigValLaplacian`: `sum_k max(0, 1 - lambda_k)` over
    the eigenvalues of `L = I - D^-1/2 W D^-1/2` (`W` symmetrised as in
    `degree_matrix`), a continuous number of semantic sets.

    Args:
        similarity: float array `(batch, n, n)` in `[0, 1]`, each answer
            similar to at least one.

    Returns:
        float64 array `(batch,)`.
    """
    laplacians = _normalized_laplacians(_checked_degrees(_symmetric(similarity)))
    return np.maximum(0.0, 1.0 - np.linalg.eigvalsh(laplacians)).sum(axis=1)


def _checked_degrees(weights):
    if (weights.sum(axis=2) <= 0).any():
        raise ValueError(
            "An answer is similar to none (a zero row of `similarity`): its graph Laplacian "
            "is undefined."
        )
    return weights


def kernel_language_entropy(
    entailment, contradiction, time=HEAT_KERNEL_TIME, normalize=True, scale=True, jitter=0.0
):
    """lm-polygraph's `KernelLanguageEntropy` (KLE with the heat kernel):
    the von Neumann entropy of the heat kernel `expm(-time L)` of the
    graph whose weights are `E + E^T + (2 - E - E^T - C - C^T) / 2` (`E`,
    `C` the NLI model's entailment and contradiction probabilities; the
    paper's weights 1, 0.5, 0 of entailment, neutral, contradiction, both
    directions summed), `L = D - W` with `D` the column sums.

    With `normalize`, the kernel is divided by the outer product of the
    square roots of its diagonal (plus lm-polygraph's 1e-12) and by `n`;
    the entropy is `-sum e log e` over the eigenvalues of `K + jitter I`
    whose magnitude exceeds 1e-8; with `scale`, it is divided by `log n`.
    (lm-polygraph takes the eigenvalues with a general solver; the kernel
    is symmetric, and these are taken with a symmetric one.)

    Args:
        entailment: float array `(batch, n, n)` in `[0, 1]`.
        contradiction: float array `(batch, n, n)` in `[0, 1]`.
        time: positive float, the heat kernel's `t` (0.3).
        normalize: bool (lm-polygraph's default True).
        scale: bool (True).
        jitter: float (0).

    Returns:
        float64 array `(batch,)`.
    """
    entailment = checked_matrices(entailment, "entailment", 0.0, 1.0)
    contradiction = checked_matrices(contradiction, "contradiction", 0.0, 1.0)
    if entailment.shape != contradiction.shape:
        raise ValueError(
            f"`entailment` {entailment.shape} and `contradiction` {contradiction.shape} must "
            "have one shape."
        )
    time = check_real(time, "time", low=0.0, low_open=True)
    jitter = check_real(jitter, "jitter")
    both = entailment + np.swapaxes(entailment, 1, 2)
    neutral = 2.0 - both - contradiction - np.swapaxes(contradiction, 1, 2)
    weights = both + 0.5 * neutral
    n = weights.shape[1]
    out = []
    for w in weights:
        kernel = scipy.linalg.expm(-time * (np.diag(w.sum(axis=0)) - w))
        if normalize:
            root = np.sqrt(np.diag(kernel)) + 1e-12
            kernel = kernel / np.outer(root, root) / n
        values = np.linalg.eigvalsh(kernel + jitter * np.eye(n))
        values = values[np.abs(values) > 1e-8]
        entropy = -np.sum(values * np.log(values))
        out.append(entropy / np.log(n) if scale else entropy)
    return np.asarray(out, "float64")


def luq(entailment_logits, contradiction_logits):
    """lm-polygraph's `LUQ` (its basic form: whole answers, no sentence
    splitting): one minus the mean over answers of each answer's mean
    similarity to the others, the similarity of `i` to `j` being
    `e / (e + c)` with `e`, `c` the exponentials of the NLI model's
    entailment and contradiction logits.

    Args:
        entailment_logits: float array `(batch, n, n)`, `n >= 2`.
        contradiction_logits: float array `(batch, n, n)`.

    Returns:
        float64 array `(batch,)`.
    """
    entailment_logits = checked_matrices(entailment_logits, "entailment_logits")
    contradiction_logits = checked_matrices(contradiction_logits, "contradiction_logits")
    if entailment_logits.shape != contradiction_logits.shape:
        raise ValueError("`entailment_logits` and `contradiction_logits` must have one shape.")
    n = entailment_logits.shape[1]
    if n < 2:
        raise ValueError(f"LUQ compares answers with others: it needs 2 or more; got {n}.")
    similarity = scipy.special.expit(entailment_logits - contradiction_logits)
    others = (similarity.sum(axis=2) - np.diagonal(similarity, axis1=1, axis2=2)) / (n - 1)
    return 1.0 - others.mean(axis=1)


def eigenscore(embeddings, alpha=EIGENSCORE_ALPHA):
    """lm-polygraph's `EigenScore`: the mean log-eigenvalue of the
    answers' embedding covariance `Z J Z^T + alpha I` (`J` centres each
    embedding over its features, as lm-polygraph's `J_d` does; the paper
    centres too), eigenvalues at or below 0 taken as 1e-10.

    Args:
        embeddings: float array `(batch, n, features)`, one embedding per
            sampled answer (lm-polygraph: the last generated token's
            hidden state in the middle layer).
        alpha: float, the regulariser (1e-3).

    Returns:
        float64 array `(batch,)`.
    """
    embeddings = checked_array(embeddings, "embeddings", 3)
    if 0 in embeddings.shape:
        raise ValueError(
            f"`embeddings` must be an array (batch, samples, features); got {embeddings.shape}."
        )
    if not np.isfinite(embeddings).all():
        raise ValueError("`embeddings` holds NaN or infinite values.")
    alpha = check_real(alpha, "alpha")
    centred = embeddings - embeddings.mean(axis=2, keepdims=True)
    covariance = centred @ np.swapaxes(embeddings, 1, 2)
    values = np.linalg.eigvalsh(covariance + alpha * np.eye(embeddings.shape[1]))
    return np.log(np.where(values > 0, values, 1e-10)).mean(axis=1)
