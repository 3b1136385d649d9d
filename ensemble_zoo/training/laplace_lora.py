"""Laplace-LoRA: posterior samples of a LoRA fine-tune's adapters as the
members of one LoRA-Ensemble.

Laplace-LoRA (Yang et al. 2024, "Bayesian Low-rank Adaptation for Large
Language Models", arXiv 2308.13111; the LoRA-Ensemble paper's Bayes-LoRA
baseline, its appendix W): a standard LoRA fine-tune, then a Laplace
approximation over the adapter weights alone, with Kronecker-factored
curvature (`kfac_factors`), each large factor kept at low rank (`n_kfac`,
10 in the paper), and a Gaussian prior of variance 1e-3.

Decisions, against the authors' code (github.com/MaximeRobeyns/
bayesian_lora, the implementation the LoRA-Ensemble paper cites):

- Curvature: the exact generalized Gauss-Newton K-FAC, laplace-torch's
  default, where their code draws one label per example from the model
  (a one-sample estimate of the same Fisher); every position counts where
  their hooks read the last token only (a causal LM's classifying
  position). Their low-rank factors come from an incremental SVD over
  the batches; here a large factor keeps its `n_kfac` largest
  eigenpairs, what that SVD approximates.
- Predictive: posterior *weight* samples, each a member of one batched
  LoRA-Ensemble (laplace-torch's `pred_type="nn"`): `S` samples cost what
  `S` LoRA-Ensemble members cost, and every tool of the ensembles
  (`predict_uncertainty`, evaluation, export) applies. Their code samples
  logits from the linearised model's Gaussian instead (laplace-torch's
  `"glm"`), which needs the Jacobian of every logit.
"""

import numpy as np
from keras import ops

from ensemble_zoo.training.kfac import kfac_factors
from ensemble_zoo.training.kfac import logits_of
from ensemble_zoo.training.kfac import lora_adapters
from ensemble_zoo.training.member_stacking import with_members
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real

#: A Kronecker factor with a side of at least this many is kept at low rank
#: (`n_kfac` eigenpairs); the authors' code uses 512 (`lr_threshold`).
LOW_RANK_THRESHOLD = 512


def factor_eigen(factor, n_kfac=None):
    """`(eigenvalues, eigenvectors)` of a symmetric Kronecker factor, the
    eigenvalues clipped at 0; with `n_kfac`, only the `n_kfac` largest are
    kept (the others set to 0: a rank-`n_kfac` factor)."""
    values, vectors = np.linalg.eigh(np.asarray(factor, np.float64))
    values = np.clip(values, 0.0, None)
    if n_kfac is not None and n_kfac < len(values):
        values[: len(values) - n_kfac] = 0.0
    return values, vectors


def posterior_samples(mean, input_factor, output_factor, prior_precision, noise):
    """Samples of one weight matrix from its Kronecker-factored Laplace
    posterior `N(mean, (I x O + prior_precision)^-1)`.

    Args:
        mean: array `(d_in, d_out)`, the fine-tuned weights.
        input_factor: `(eigenvalues, eigenvectors)` of the input factor
            `(d_in, d_in)` (`factor_eigen`).
        output_factor: the same of the output factor `(d_out, d_out)`.
        prior_precision: float, the prior's precision (1 / its variance).
        noise: array `(samples, d_in, d_out)` of standard normal draws.

    Returns:
        `(samples, d_in, d_out)`: `mean + Q_i [(Q_i^T E Q_o) / sqrt(a_i o_j +
        prior_precision)] Q_o^T` for each draw `E`, the symmetric square root
        of the posterior covariance applied to `E`.
    """
    (a, q_in), (o, q_out) = input_factor, output_factor
    scale = 1.0 / np.sqrt(np.outer(a, o) + prior_precision)
    rotated = np.einsum("ia,sij,jb->sab", q_in, noise, q_out)
    return mean[None] + np.einsum("ia,sab,jb->sij", q_in, rotated * scale, q_out)


def log_marginal_likelihood(log_likelihood, posteriors, prior_precision):
    """The Laplace approximation of the log evidence (laplace-torch's
    `log_marginal_likelihood` for a Kronecker-factored posterior):
    `log p(D | theta) - (prior_precision / 2) ||theta||^2 - (1/2) (log det
    P - log det P_0)`, with `P = I x O + prior_precision` per matrix.

    Args:
        log_likelihood: float, the training set's summed log-likelihood at
            the fine-tuned weights.
        posteriors: list of `(mean, input_factor, output_factor)`, each
            factor `(eigenvalues, eigenvectors)` (`factor_eigen`).
        prior_precision: float.
    """
    total = float(log_likelihood)
    for mean, (a, _), (o, _) in posteriors:
        total -= 0.5 * prior_precision * float(np.sum(np.square(mean)))
        total -= 0.5 * float(np.sum(np.log1p(np.outer(a, o) / prior_precision)))
    return total


def _marginal_likelihood_precision(model, x, y, posteriors, batch_size):
    """The prior precision maximising `log_marginal_likelihood` (a bounded
    search over its log, 1e-4 to 1e8)."""
    from scipy.optimize import minimize_scalar

    count = len(x[next(iter(x))] if isinstance(x, dict) else x)
    logits = np.concatenate(
        [
            logits_of(
                model(
                    {k: v[i : i + batch_size] for k, v in x.items()}
                    if isinstance(x, dict)
                    else x[i : i + batch_size],
                    training=False,
                )
            )
            for i in range(0, count, batch_size)
        ]
    )
    if logits.ndim != 2:
        raise ValueError(
            '`prior_variance="marginal_likelihood"` takes a classifier (labels `y` per '
            "example); pass a number for a causal LM."
        )
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    log_likelihood = float(np.take_along_axis(log_p, np.asarray(y)[:, None], -1).sum())
    result = minimize_scalar(
        lambda t: -log_marginal_likelihood(log_likelihood, posteriors, float(np.exp(t))),
        bounds=(np.log(1e-4), np.log(1e8)),
        method="bounded",
    )
    return float(np.exp(result.x))


def laplace_lora(
    model,
    x,
    num_samples,
    prior_variance=1e-3,
    n_kfac=10,
    batch_size=32,
    seed=None,
    y=None,
    name=None,
):
    """A LoRA-Ensemble whose members are Laplace-LoRA posterior samples.

    Args:
        model: a one-member LoRA-Ensemble (a standard LoRA fine-tune): a
            classifier (`LoRAEnsembleImageClassifier`,
            `LoRAEnsembleTextClassifier`, `LoRAEnsembleClassifier`) or a
            causal LM (`LoRAEnsembleCausalLM`, whose samples then decode as
            members: `generate(..., return_uncertainty=True)`). It is not
            changed.
        x: the training inputs the curvature sums over (what the model's
            `call` takes: images in [0, 1], or the dict of token tensors,
            a causal LM's `token_ids` and `padding_mask`).
        num_samples: int, the posterior samples, the new model's members
            (512 in the LoRA-Ensemble paper's SST-2 run).
        prior_variance: float, the Gaussian prior's variance over each
            adapter weight (1e-3, the paper's), or `"marginal_likelihood"`:
            the variance that maximises the Laplace evidence
            (`log_marginal_likelihood`) on `(x, y)`.
        n_kfac: int, the rank kept of a Kronecker factor with a side of at
            least `LOW_RANK_THRESHOLD` (10, the paper's); `None` keeps all.
        batch_size: int, examples per curvature pass.
        seed: optional int for the draws.
        y: the labels of `x`, for `prior_variance="marginal_likelihood"`.
        name: optional name of the new model. Defaults to `model`'s name
            with `"_laplace"` appended.

    Returns:
        A model of `model`'s class with `num_samples` members: member `s`
        has adapters `(A_s, B_s)`, each matrix drawn independently from its
        Kronecker-factored posterior (`posterior_samples`), and everything
        else (the frozen backbone, the head) of `model`.

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=4, num_layers=1, num_heads=2,
        hidden_dim=8, mlp_dim=16,
    )
    lora = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        keras_hub.models.ViTImageClassifier(backbone=vit, num_classes=3, preprocessor=None),
        num_members=1, rank=2, seed=0,
    )
    x = np.random.default_rng(0).uniform(size=(16, 8, 8, 1)).astype("float32")
    bayes = ez.training.laplace_lora(lora, x, num_samples=8, seed=0)
    bayes.predict(x[:2], verbose=0).shape  # (2, 8, 3)
    ```
    """
    num_samples = check_positive_int(num_samples, "num_samples")
    evidence = isinstance(prior_variance, str) and prior_variance == "marginal_likelihood"
    if evidence and y is None:
        raise ValueError('`prior_variance="marginal_likelihood"` needs the labels `y` of `x`.')
    if not evidence:
        prior_variance = check_real(prior_variance, "prior_variance", low=0.0, low_open=True)
    if n_kfac is not None:
        n_kfac = check_positive_int(n_kfac, "n_kfac")
    factors = kfac_factors(model, x, batch_size=batch_size, seed=seed)
    posteriors = []  # (variable, mean, input eigen, output eigen)
    for (_, _, adapter), factor in zip(lora_adapters(model), factors, strict=True):
        for matrix, variable in (("a", adapter.lora_a), ("b", adapter.lora_b)):
            mean = np.asarray(ops.convert_to_numpy(variable[0]), np.float64)
            # The mean input factor times the summed output factor: the
            # summed loss's curvature (laplace-torch's scale).
            eigens = [
                factor_eigen(f, n_kfac if len(f) >= LOW_RANK_THRESHOLD else None)
                for f in factor[matrix]
            ]
            posteriors.append((variable, mean, *eigens))
    if evidence:
        precision = _marginal_likelihood_precision(
            model, x, y, [p[1:] for p in posteriors], batch_size
        )
    else:
        precision = 1.0 / prior_variance
    rng = np.random.default_rng(seed)
    samples = {}
    for variable, mean, input_eigen, output_eigen in posteriors:
        noise = rng.standard_normal((num_samples,) + mean.shape)
        drawn = posterior_samples(mean, input_eigen, output_eigen, precision, noise)
        samples[id(variable)] = drawn.astype(variable.dtype)

    def values(source, member_axis):
        value = ops.convert_to_numpy(source)
        if id(source) in samples:
            return samples[id(source)]
        if member_axis:  # the member's head: every sample keeps it
            return np.repeat(value, num_samples, axis=0)
        return value

    return with_members(model, num_samples, values, name=name or f"{model.name}_laplace")
