"""The MLX checkpoint layout of Qwen3.5/3.6-MoE: bf16 rounding, MLX affine quantization, the
safetensors writer and sharding, the quantization block of config.json, and the conversion of a
transformers state dict into MLX tensors.

Shared by tools/refgen (random reference fixtures) and tools/demomodel (the trained demo model), so
both write checkpoints through one code path. numpy only.
"""

import json
import struct

import numpy as np

GROUP_SIZE = 64
DEFAULT_BITS = 4
ROUTER_BITS = 8  # mlp.gate and mlp.shared_expert_gate
ROUTER_MODULES = ("mlp.gate", "mlp.shared_expert_gate")
QUANT_EPS = 1e-7  # MLX's floor on a group's scale

# Norms transformers stores zero-centred (it multiplies by 1 + w); MLX stores the gain itself.
PLUS_ONE_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight",
                  "k_norm.weight")


# ---------------------------------------------------------------- bf16 and MLX affine quantization


def bf16_bits(x):
    """float32 -> bf16 bit patterns, round to nearest even (what a bf16 cast does)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_round(x):
    return bf16_value(bf16_bits(x))


def mlx_quantize(w, bits):
    """MLX affine quantization of w [..., in] along the last axis, groups of GROUP_SIZE.

    Follows MLX's affine_quantize: the edge of larger magnitude becomes the bias and the scale
    is adjusted so that 0 falls on an integer code (the scale is negative when the max edge is
    larger). Scale and bias are then rounded to bf16 and the codes computed from the rounded
    values. Returns (packed u32 [..., in*bits/32], scale bits, bias bits, dequantized float32).
    """
    w = np.asarray(w, dtype=np.float32)
    n_bins = float(2**bits - 1)
    cols = w.shape[-1]
    if cols % GROUP_SIZE:
        raise ValueError(f"input dim {cols} is not a multiple of {GROUP_SIZE}")
    g = w.reshape(*w.shape[:-1], cols // GROUP_SIZE, GROUP_SIZE)
    wmax = g.max(-1, keepdims=True)
    wmin = g.min(-1, keepdims=True)
    mask = np.abs(wmin) > np.abs(wmax)
    scale = np.maximum((wmax - wmin) / n_bins, QUANT_EPS)
    scale = np.where(mask, scale, -scale)
    edge = np.where(mask, wmin, wmax)
    q0 = np.rint(edge / scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scale)
    bias = np.where(q0 == 0, 0.0, edge)
    s_bits, b_bits = bf16_bits(scale), bf16_bits(bias)
    s, b = bf16_value(s_bits), bf16_value(b_bits)
    q = np.clip(np.rint((g - b) / s), 0, n_bins).astype(np.uint32)
    deq = (s * q.astype(np.float32) + b).astype(np.float32)
    per = 32 // bits
    qf = q.reshape(*w.shape[:-1], cols // per, per)
    shifts = (np.arange(per, dtype=np.uint32) * bits).astype(np.uint32)
    packed = np.bitwise_or.reduce(qf << shifts, axis=-1).astype(np.uint32)
    return packed, s_bits[..., 0], b_bits[..., 0], deq.reshape(w.shape)


# ---------------------------------------------------------------- tensors of one checkpoint


class Tensors:
    """The tensors of one MLX checkpoint: name -> (safetensors dtype, shape, bytes), the 8-bit
    overrides for config.json, and what each quantized module dequantizes to."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.tensors = {}
        self.quant_overrides = {}

    def put(self, name, dtype, arr):
        arr = np.ascontiguousarray(arr)
        self.tensors[name] = (dtype, tuple(arr.shape), arr.tobytes())

    def quantized(self, module, w, bits=DEFAULT_BITS):
        """Writes module.weight/.scales/.biases; returns the dequantized float32 weight."""
        packed, s, b, deq = mlx_quantize(w, bits)
        name = self.prefix + module
        self.put(name + ".weight", "U32", packed.astype("<u4"))
        self.put(name + ".scales", "BF16", s.astype("<u2"))
        self.put(name + ".biases", "BF16", b.astype("<u2"))
        if bits != DEFAULT_BITS:
            self.quant_overrides[name] = {"group_size": GROUP_SIZE, "bits": bits}
        return deq

    def bf16(self, name, values):
        """Writes a BF16 tensor; returns the float32 values it holds."""
        bits = bf16_bits(values)
        self.put(self.prefix + name, "BF16", bits.astype("<u2"))
        return bf16_value(bits)

    def f32(self, name, values):
        values = np.asarray(values, dtype=np.float32)
        self.put(self.prefix + name, "F32", values.astype("<f4"))
        return values


def router_bits(module):
    return ROUTER_BITS if module.endswith(ROUTER_MODULES) else DEFAULT_BITS


def convert_state_dict(state, prefix="language_model."):
    """transformers Qwen3_5MoeForCausalLM parameters (name -> float32 array) -> MLX tensors.

    The inverse of what MLX's conversion of the Hugging Face checkpoint leaves: zero-centred norms
    get their 1 added, conv1d goes from [C, 1, K] to [C, K, 1], fused experts gate_up_proj
    [E, 2I, H] are split into switch_mlp.gate_proj / up_proj and down_proj renamed, every matrix
    is quantized (4 bits, routers 8 bits), A_log stays F32, other vectors are BF16. Returns the
    Tensors and a dict with the same keys as state holding exactly what the files dequantize to,
    in transformers' layout, to load back into the model for reference outputs.
    """
    out = Tensors(prefix)
    view = {}
    for name in sorted(state):
        w = np.asarray(state[name], dtype=np.float32)
        if name.endswith("experts.gate_up_proj"):
            base = name[: -len("experts.gate_up_proj")] + "switch_mlp."
            inter = w.shape[1] // 2
            gate = out.quantized(base + "gate_proj", w[:, :inter, :])
            up = out.quantized(base + "up_proj", w[:, inter:, :])
            view[name] = np.concatenate([gate, up], axis=1)
        elif name.endswith("experts.down_proj"):
            view[name] = out.quantized(name[: -len("experts.down_proj")] + "switch_mlp.down_proj", w)
        elif name == "model.norm.weight" or name.endswith(PLUS_ONE_NORMS):
            view[name] = out.bf16(name, w + np.float32(1.0)) - np.float32(1.0)
        elif name.endswith("conv1d.weight"):
            held = out.bf16(name, w.transpose(0, 2, 1))
            view[name] = held.transpose(0, 2, 1)
        elif name.endswith("A_log"):
            view[name] = out.f32(name, w)
        elif w.ndim == 1:
            view[name] = out.bf16(name, w)
        elif name.endswith(".weight") and w.ndim == 2:
            module = name[: -len(".weight")]
            view[name] = out.quantized(module, w, router_bits(module))
        else:
            raise ValueError(f"{name}: no MLX layout for shape {w.shape}")
    return out, view


# ---------------------------------------------------------------- files


def quantization_block(overrides):
    q = {"group_size": GROUP_SIZE, "bits": DEFAULT_BITS, "mode": "affine"}
    for k in sorted(overrides):
        q[k] = overrides[k]
    return q


def write_safetensors(path, names, tensors):
    """Writes tensors in the order names gives, with MLX's metadata, the header padded to 8 bytes.

    The padding is Petal's, not MLX's: mx.save_safetensors leaves the header unpadded (data at
    8 + len(header)), sorts the header's keys and writes the data in its hash map's order. Tests
    meet that exact layout through checkpointtest.RewriteMLX and safetensors.EncodeMLX in Go, which
    rewrite these fixtures byte for byte as MLX would.
    """
    header = {"__metadata__": {"format": "mlx"}}
    off = 0
    for n in names:
        dtype, shape, data = tensors[n]
        header[n] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((-len(hb)) % 8)  # keeps every tensor 4-byte aligned (all sizes are multiples of 4)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for n in names:
            f.write(tensors[n][2])


def module_of(name):
    return name.rsplit(".", 1)[0]


def shard_names(names, tensors, shards):
    """Split sorted names into contiguous shards of similar size, each cut inside a quantized triple."""
    sizes = [len(tensors[n][2]) for n in names]
    total = sum(sizes)
    cuts, acc, want = [], 0, 1
    for i, s in enumerate(sizes):
        if want < shards and acc >= total * want / shards and (not cuts or i > cuts[-1]):
            j = i
            # move the cut to the nearest place that separates parts of one quantized module
            while j < len(names) and not (module_of(names[j - 1]) == module_of(names[j])
                                          and names[j].endswith((".scales", ".weight"))):
                j += 1
            cuts.append(j)
            want += 1
        acc += s
    bounds = [0] + cuts + [len(names)]
    return [names[a:b] for a, b in zip(bounds, bounds[1:])]
