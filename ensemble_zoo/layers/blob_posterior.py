"""BLoB's variational posterior over a LoRA adapter's `A` matrices.

BLoB (Wang et al. 2024, "BLoB: Bayesian Low-Rank Adaptation by
Backpropagation for Large Language Models", arXiv 2406.11675; the
LoRA-Ensemble paper cites it beside Laplace-LoRA): each entry of `A` is a
Gaussian `N(mu, sigma^2)` learned by backpropagation, `B` stays a point
estimate. The formulas, as the authors' code (github.com/Wang-ML-Lab/
bayesian-peft, `modelwrappers/blob.py`) computes them:

- `sigma = rho^2`, with `rho` initialised uniformly in `[eps / sqrt(2),
  eps]` (`eps = 0.05`);
- prior `N(0, prior_std^2)` on every entry of `A` (`prior_std = 0.2`, their
  `bayes_beta`); KL per entry `log(prior_std / sigma) + (sigma^2 + mu^2) /
  (2 prior_std^2) - 1/2`, summed (they add 1e-6 inside the logarithms and
  the denominator for stability; the exact formula is used here);
- in training, the update's noise by flipout: with random signs `r` (per
  row and input feature) and `s` (per row and rank) and one standard
  normal draw `E` of `A`'s shape, the rank-space noise of a row `x` is
  `s * ((x * r) @ (sigma * E))`, added to `x @ mu` before `B`. Each row
  sees an `A` of the posterior's marginal, the rows' draws decorrelated by
  the signs.

Decisions, against that code: the KL joins the loss `fit` minimises, scaled
by `kl_weight` (`1 / number of training examples` is the evidence lower
bound per example) and averaged over the members of a LoRA-Ensemble (each
member its own BLoB, as the members' cross-entropies are averaged), where
their code steps it with a second SGD optimizer (learning rate 0.02,
weight `1 / batches per epoch`); at inference the
posterior's samples become the members of one LoRA-Ensemble
(`ensemble_zoo.training.blob_samples`) where their code re-runs the model
once per sample.
"""

import math

from keras import ops

from ensemble_zoo.utils.validation import check_real

#: BLoB's settings and their defaults (the authors' code's): `eps` bounds
#: `rho`'s initialisation, `prior_std` is the prior's standard deviation;
#: `kl_weight` has none (it depends on the training set's size).
BLOB_DEFAULTS = {"eps": 0.05, "prior_std": 0.2}


def check_blob(blob):
    """`blob` completed with `BLOB_DEFAULTS`, or `None`; a `ValueError`
    names a bad or unknown key, a missing `kl_weight` included."""
    if blob is None:
        return None
    if not isinstance(blob, dict):
        raise TypeError(
            "`blob` must be None or a dict with `kl_weight` (e.g. 1 / number of training "
            f"examples) and optionally `eps` and `prior_std`; got {blob!r}."
        )
    unknown = sorted(set(blob) - {"kl_weight", *BLOB_DEFAULTS})
    if unknown or "kl_weight" not in blob:
        raise ValueError(
            "`blob` takes the keys `kl_weight` (required: the KL term's weight in the loss, "
            "1 / number of training examples for the per-example evidence bound), `eps` and "
            f"`prior_std`; got keys {sorted(blob)}."
        )
    return {
        "kl_weight": check_real(blob["kl_weight"], "blob['kl_weight']", low=0.0),
        "eps": check_real(
            blob.get("eps", BLOB_DEFAULTS["eps"]), "blob['eps']", low=0.0, low_open=True
        ),
        "prior_std": check_real(
            blob.get("prior_std", BLOB_DEFAULTS["prior_std"]),
            "blob['prior_std']",
            low=0.0,
            low_open=True,
        ),
    }


def rho_bounds(eps):
    """The interval `rho` is drawn from at initialisation."""
    return eps / math.sqrt(2.0), eps


def blob_sigma(rho):
    """The posterior's standard deviation, `rho^2`."""
    return ops.square(rho)


def gaussian_kl(mean, sigma, prior_std):
    """`KL(N(mean, sigma^2) || N(0, prior_std^2))` summed over entries."""
    variance = ops.square(prior_std)
    return ops.sum(
        math.log(prior_std)
        - ops.log(sigma)
        + (ops.square(sigma) + ops.square(mean)) / (2.0 * variance)
        - 0.5
    )


def flipout_noise(x, sigma, input_signs, rank_signs, normal, equation):
    """The rank-space flipout noise `s * ((x * r) @ (sigma * E))`.

    Args:
        x: the rows' inputs.
        sigma: the posterior's standard deviations, `A`'s shape.
        input_signs: `x`'s shape, entries +-1 (`r`).
        rank_signs: the result's shape, entries +-1 (`s`).
        normal: standard normal draws of `A`'s shape (`E`).
        equation: the einsum of `x` with `A` (e.g. `"mni,mir->mnr"`).
    """
    return rank_signs * ops.einsum(equation, x * input_signs, sigma * normal)
