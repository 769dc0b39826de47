"""Torch modules of the zoo: parameter names are the checkpoint keys vLLM loads, forwards compute
what vLLM computes (read against vllm/model_executor/models/{llama,llama_eagle,llama_eagle3,medusa,
mimo_mtp}.py of vLLM 0.32). Used by the random builder (build.py) and the trainer (train.py).

Conventions shared with vLLM's proposers (v1/spec_decode/eagle.py, medusa.py):
- the target's "hidden state" h_i is the final-normed output at position i (it predicts x_{i+1});
- a drafter at position i reads (token x_{i+1}, state h_i) with rotary position i and predicts x_{i+2};
  its next step reads (its drafted token, its own output state) at position i+1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROPE_THETA = 10000.0
RMS_EPS = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)
        return (self.weight * x).to(dtype)


def rotary(positions: torch.Tensor, head_dim: int):
    """cos/sin tables (T, head_dim) of Llama's neox-style rotary embedding."""
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, in_dim: int | None = None):
        super().__init__()
        in_dim = in_dim or hidden
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(in_dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x, rope):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope
        q, k = _rotate(q, cos.to(q.dtype), sin.to(q.dtype)), _rotate(k, cos.to(k.dtype), sin.to(k.dtype))
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm Llama layer; `input_norm=False` is EAGLE-1's first layer (vLLM replaces it by Identity)."""

    def __init__(self, shape: dict, input_norm: bool = True):
        super().__init__()
        h = shape["hidden_size"]
        if input_norm:
            self.input_layernorm = RMSNorm(h)
        self.self_attn = Attention(h, shape["num_attention_heads"], shape["num_key_value_heads"])
        self.post_attention_layernorm = RMSNorm(h)
        self.mlp = MLP(h, shape["intermediate_size"])

    def forward(self, x, rope):
        norm = getattr(self, "input_layernorm", None)
        h = x + self.self_attn(norm(x) if norm is not None else x, rope)
        return h + self.mlp(self.post_attention_layernorm(h))


class _Body(nn.Module):
    def __init__(self, shape: dict, vocab: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, shape["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(shape) for _ in range(shape["num_hidden_layers"]))
        self.norm = RMSNorm(shape["hidden_size"])


class Llama(nn.Module):
    """LlamaForCausalLM (untied): keys model.embed_tokens, model.layers.N.*, model.norm, lm_head."""

    def __init__(self, shape: dict, vocab: int):
        super().__init__()
        self.shape = shape
        self.model = _Body(shape, vocab)
        self.lm_head = nn.Linear(shape["hidden_size"], vocab, bias=False)

    def hidden(self, ids, aux_layers=()):
        """(final-normed states, [residual stream entering each layer in aux_layers])."""
        head_dim = self.shape["hidden_size"] // self.shape["num_attention_heads"]
        rope = rotary(torch.arange(ids.shape[1]), head_dim)
        x = self.model.embed_tokens(ids)
        aux = []
        for i, layer in enumerate(self.model.layers):
            if i in aux_layers:
                aux.append(x)
            x = layer(x, rope)
        return self.model.norm(x), aux

    def forward(self, ids):
        return self.lm_head(self.hidden(ids)[0])


class EagleHead(nn.Module):
    """EAGLE-1 (EagleLlamaForCausalLM): fc([embed(x_{i+1}); h_i]) -> one layer without input norm.
    Embedding and lm_head are the target's; vLLM applies the lm_head to the layer's output unnormed."""

    def __init__(self, shape: dict):
        super().__init__()
        h = shape["hidden_size"]
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(shape, input_norm=False)])
        self.head_dim = h // shape["num_attention_heads"]

    def forward(self, embeds, states, positions):
        rope = rotary(positions, self.head_dim)
        return self.layers[0](self.fc(torch.cat((embeds, states), dim=-1)), rope)


class Eagle3Midlayer(nn.Module):
    def __init__(self, shape: dict):
        super().__init__()
        h = shape["hidden_size"]
        self.input_layernorm = RMSNorm(h)
        self.hidden_norm = RMSNorm(h)
        self.self_attn = Attention(h, shape["num_attention_heads"], shape["num_key_value_heads"], in_dim=2 * h)
        self.post_attention_layernorm = RMSNorm(h)
        self.mlp = MLP(h, shape["intermediate_size"])


class Eagle3Head(nn.Module):
    """EAGLE-3 (Eagle3LlamaForCausalLM): the first step's state is fc(concat of the target's aux states);
    the layer attends over [norm(embed); hidden_norm(state)] and adds to the state (the residual);
    logits = own lm_head(norm(out)); the next step reads the unnormed out."""

    def __init__(self, shape: dict, vocab: int, aux: int):
        super().__init__()
        h = shape["hidden_size"]
        self.fc = nn.Linear(aux * h, h, bias=False)
        self.midlayer = Eagle3Midlayer(shape)
        self.norm = RMSNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.head_dim = h // shape["num_attention_heads"]

    def forward(self, embeds, states, positions):
        """(unnormed out = the next step's state, logits)."""
        m = self.midlayer
        rope = rotary(positions, self.head_dim)
        x = torch.cat((m.input_layernorm(embeds), m.hidden_norm(states)), dim=-1)
        h = states + m.self_attn(x, rope)
        out = h + m.mlp(m.post_attention_layernorm(h))
        return out, self.lm_head(self.norm(out))


class _ResidualBlock(nn.Module):
    def __init__(self, h: int):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(h, h, bias=False)])

    def forward(self, x):
        return x + F.silu(self.layers[0](x))


class MedusaHeads(nn.Module):
    """Medusa: head k maps h_t to x_{t+2+k} via x + SiLU(W x) and one shared lm_head (stored lm_heads.0)."""

    def __init__(self, h: int, vocab: int, heads: int):
        super().__init__()
        self.blocks = nn.ModuleList(_ResidualBlock(h) for _ in range(heads))
        self.lm_heads = nn.ModuleList([nn.Linear(h, vocab, bias=False)])

    def forward(self, states):
        return [self.lm_heads[0](block(states)) for block in self.blocks]


class MtpLayer(nn.Module):
    """MiMo's MTP layer (stored under model.mtp_layers.0.): final_norm(x + layer(x)), with
    x = input_proj([hidden_norm(h_i); token_norm(embed(x_{i+1}))]); embedding and lm_head are the
    target's; the embedding at position 0 is zeroed, as vLLM does."""

    def __init__(self, shape: dict):
        super().__init__()
        h = shape["hidden_size"]
        self.token_layernorm = RMSNorm(h)
        self.hidden_layernorm = RMSNorm(h)
        self.input_proj = nn.Linear(2 * h, h, bias=False)
        layer = DecoderLayer(shape)
        self.input_layernorm = layer.input_layernorm
        self.self_attn = layer.self_attn
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.mlp = layer.mlp
        self.final_layernorm = RMSNorm(h)
        self.head_dim = h // shape["num_attention_heads"]

    def forward(self, embeds, states, positions):
        embeds = torch.where(positions[:, None] == 0, torch.zeros_like(embeds), embeds)
        x = self.input_proj(torch.cat((self.hidden_layernorm(states), self.token_layernorm(embeds)), dim=-1))
        rope = rotary(positions, self.head_dim)
        h = x + self.self_attn(self.input_layernorm(x), rope)
        h = h + self.mlp(self.post_attention_layernorm(h))
        return self.final_layernorm(h)


class MlpSpeculatorLayout(nn.Module):
    """IBM's MLP speculator with tie_weights (emb.0, proj.0/1, ln.0, head.N). vLLM 0.32 cannot run it,
    so the zoo only ever holds its random initialisation: parameters, no forward."""

    def __init__(self, h: int, vocab: int, inner: int, n_predict: int):
        super().__init__()
        self.emb = nn.ModuleList([nn.Embedding(vocab, inner)])
        self.proj = nn.ModuleList([nn.Linear(h, inner, bias=False), nn.Linear(inner, inner, bias=False)])
        self.ln = nn.ModuleList([nn.LayerNorm(inner)])
        self.head = nn.ModuleList(nn.Linear(inner, vocab, bias=False) for _ in range(n_predict))
