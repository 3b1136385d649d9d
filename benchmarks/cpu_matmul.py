"""Why 8 members decode slower under PyTorch than under JAX on this CPU:
one up-projection of the decode step, 1 row against 8 rows.

    python benchmarks/cpu_matmul.py [--repeats 20] [--no-inductor]

At batch 1 a decode step multiplies one row per member by every weight
matrix: the plain model a `(1, 2048) x (2048, 16384)` product (Gemma-2B's
MLP width), 8 members an `(8, 2048)` one. Reading the 128 MiB matrix
bounds both, so 8 rows should cost about what 1 row costs. The script
times, in one run and on the same matrix:

- `torch eager (MKL)`: `x @ W` as PyTorch runs it, through MKL's SGEMM;
- `torch eager (oneDNN)`: the same product through oneDNN's linear, the
  weight read in place as a transposed view (what the zoo's models run
  eagerly on a non-Intel CPU, `ensemble_zoo.utils.onednn_products`);
- `torch inductor, frozen`: the same product under `torch.compile(mode=
  "max-autotune")` with inductor's `freezing` (the weight a constant) and
  its C++ GEMM template among the candidates (`max_autotune_gemm_backends=
  "CPP,ATEN"`), which generates an AVX-512 / AVX2 micro-kernel;
- `jax`: `jnp.dot` under `jax.jit` (XLA:CPU), when JAX is installed.

Columns: milliseconds for 1 row and for 8 rows (median of `--repeats`)
and their ratio. MKL picks its kernels by CPU vendor; on an AMD EPYC its
8-row SGEMM is several times its 1-row GEMV, which is what the PyTorch
rows of `llm_decoding.py` pay in every projection.
"""

import argparse
import statistics
import time

import numpy as np

IN, OUT = 2048, 16384


def median_ms(fn, repeats):
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def torch_rows(weight, inputs, repeats, inductor):
    import torch

    w = torch.from_numpy(weight)
    rows = [
        (
            "torch eager (MKL)",
            [median_ms(lambda x=torch.from_numpy(x): x @ w, repeats) for x in inputs],
        ),
        (
            "torch eager (oneDNN)",
            [
                median_ms(
                    lambda x=torch.from_numpy(x): torch.ops.mkldnn._linear_pointwise(
                        x, w.t(), None, "none", [], ""
                    ),
                    repeats,
                )
                for x in inputs
            ],
        ),
    ]
    if inductor:
        import torch._inductor.config as inductor_config

        class Projection(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(w, requires_grad=False)

            def forward(self, x):
                return x @ self.w

        module = Projection().eval()
        with inductor_config.patch(freezing=True, max_autotune_gemm_backends="CPP,ATEN"):
            compiled = torch.compile(module, mode="max-autotune")
            times = []
            with torch.no_grad():
                for x in inputs:
                    x = torch.from_numpy(x)
                    times.append(median_ms(lambda x=x: compiled(x), repeats))
        rows.append(("torch inductor, frozen", times))
    return rows


def jax_rows(weight, inputs, repeats):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return []
    w = jnp.asarray(weight)
    dot = jax.jit(jnp.dot)
    return [
        (
            "jax (XLA:CPU)",
            [
                median_ms(lambda x=jnp.asarray(x): dot(x, w).block_until_ready(), repeats)
                for x in inputs
            ],
        )
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(IN, OUT)).astype("float32")
    inputs = [rng.normal(size=(r, IN)).astype("float32") for r in (1, 8)]
    rows = torch_rows(weight, inputs, args.repeats, not args.no_inductor)
    rows += jax_rows(weight, inputs, args.repeats)
    print(f"(rows, {IN}) x ({IN}, {OUT}) float32, median of {args.repeats}, ms")
    print(f"{'':<24} {'1 row':>8} {'8 rows':>8} {'ratio':>6}")
    for name, (one, eight) in rows:
        print(f"{name:<24} {one:>8.2f} {eight:>8.2f} {eight / one:>6.2f}")
    return rows


if __name__ == "__main__":
    main()
