"""Reference forwards for the checkpoint families transformers has no class for, written from their
published modeling code so that the tests compare our loader with the checkpoint's own arithmetic, not
with our reading of it. Nothing here imports or runs a checkpoint's code.

LLaDA2 (LLaDA2.0 / LLaDA2.1, inclusionAI, Apache-2.0): `modeling_llada2_moe.py` as shipped with the
checkpoints, read from two copies: github.com/yks23/Information-Gain-Sampler
dllm/dllm/pipelines/llada2/models/modeling_llada2_moe.py @ f1cb636fcd5666afa1c16c4cb12944ecb614eaf2 (the
Hugging Face file) and github.com/inclusionAI/dInfer python/dinfer/model/modeling_llada2_moe.py @
fce4e32804103baa5d55230dff0352da0cdd6ceb (the same gate, attention and rotary code). Each class below names
the published one it follows; the module and tensor names are the published ones, so `load_state_dict`
of a checkpoint's tensors is strict.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class LLaDA2MoeRMSNorm(nn.Module):  # LLaDA2MoeRMSNorm: float32 variance, weight times the input dtype
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rotary(c: dict, position_ids: torch.Tensor):
    """LLaDA2MoeRotaryEmbedding with rope_type "default": transformers' _compute_default_rope_parameters
    takes dim = int(head_dim * partial_rotary_factor); cos/sin [B, L, dim] of cat(freqs, freqs)."""
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    dim = int(head_dim * c.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = (inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):  # the published one: only the first rotary_dim dims turn
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)
    return torch.cat([q_embed, q_pass], dim=-1), torch.cat([k_embed, k_pass], dim=-1)


class LLaDA2MoeMLP(nn.Module):
    def __init__(self, c: dict, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden_size"], intermediate_size, bias=False)
        self.up_proj = nn.Linear(c["hidden_size"], intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, c["hidden_size"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LLaDA2MoeGate(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.top_k, self.num_experts = c["num_experts_per_tok"], c["num_experts"]
        self.n_group, self.topk_group = c["n_group"], c["topk_group"]
        self.routed_scaling_factor = c["routed_scaling_factor"]
        self.weight = nn.Parameter(torch.empty((self.num_experts, c["hidden_size"])))
        self.register_buffer("expert_bias", torch.zeros(self.num_experts))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def group_limited_topk(self, scores):
        num_tokens, _ = scores.size()
        group_scores = scores.view(num_tokens, self.n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (group_mask.unsqueeze(-1).expand(num_tokens, self.n_group, self.num_experts // self.n_group)
                      .reshape(num_tokens, -1))
        masked_scores = scores.masked_fill(~score_mask.bool(), float("-inf"))
        return torch.topk(masked_scores, k=self.top_k, dim=-1)

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        scores = torch.sigmoid(logits.float()).type_as(logits)
        scores_for_routing = scores + self.expert_bias
        _, topk_idx = self.group_limited_topk(scores_for_routing)
        scores = torch.gather(scores, dim=1, index=topk_idx).type_as(logits)
        topk_weight = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20) if self.top_k > 1 else scores
        return topk_idx, topk_weight * self.routed_scaling_factor


class LLaDA2MoeSparseMoeBlock(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.experts = nn.ModuleList(LLaDA2MoeMLP(c, c["moe_intermediate_size"]) for _ in range(c["num_experts"]))
        self.gate = LLaDA2MoeGate(c)
        self.shared_experts = (LLaDA2MoeMLP(c, c["moe_intermediate_size"] * c["num_shared_experts"])
                               if c.get("num_shared_experts") is not None else None)

    def forward(self, hidden_states):
        identity = hidden_states
        bsz, seq_len, h = hidden_states.shape
        topk_idx, topk_weight = self.gate(hidden_states)
        y = self.moe_infer(hidden_states.view(-1, h), topk_idx, topk_weight).view(bsz, seq_len, h)
        return y if self.shared_experts is None else y + self.shared_experts(identity)

    @torch.no_grad()
    def moe_infer(self, x, topk_ids, topk_weight):  # the published eval path: tokens sorted by expert
        cnts = topk_ids.new_zeros((topk_ids.shape[0], len(self.experts)))
        cnts.scatter_(1, topk_ids, 1)
        tokens_per_expert = cnts.sum(dim=0).tolist()
        idxs = topk_ids.view(-1).argsort()
        sorted_tokens = x[idxs // topk_ids.shape[1]]
        outputs, start_idx = [], 0
        for i, num_tokens in enumerate(tokens_per_expert):
            if num_tokens == 0:
                continue
            outputs.append(self.experts[i](sorted_tokens[start_idx:start_idx + num_tokens]))
            start_idx += num_tokens
        outs = torch.cat(outputs, dim=0) if outputs else sorted_tokens.new_empty(0)
        new_x = torch.empty_like(outs)
        new_x[idxs] = outs
        return (new_x.view(*topk_ids.shape, -1).type(topk_weight.dtype).mul_(topk_weight.unsqueeze(dim=-1))
                .sum(dim=1).type(new_x.dtype))


class LLaDA2MoeAttention(nn.Module):  # eager_attention_forward with the additive 4D mask it is given
    def __init__(self, c: dict):
        super().__init__()
        self.num_heads, self.num_key_value_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.num_heads
        self.scaling = self.head_dim ** -0.5
        self.use_qk_norm = c.get("use_qk_norm", False)
        self.query_key_value = nn.Linear(c["hidden_size"], (self.num_heads + 2 * self.num_key_value_heads)
                                         * self.head_dim, bias=c.get("use_qkv_bias", False))
        if self.use_qk_norm:
            self.query_layernorm = LLaDA2MoeRMSNorm(self.head_dim, c["rms_norm_eps"])
            self.key_layernorm = LLaDA2MoeRMSNorm(self.head_dim, c["rms_norm_eps"])
        self.dense = nn.Linear(self.num_heads * self.head_dim, c["hidden_size"], bias=c.get("use_bias", True))

    def forward(self, hidden_states, attention_mask, cos, sin):
        bsz, q_len, _ = hidden_states.size()
        qkv = self.query_key_value(hidden_states).view(bsz, q_len, self.num_heads + 2 * self.num_key_value_heads,
                                                       self.head_dim)
        q, k, v = qkv.split([self.num_heads, self.num_key_value_heads, self.num_key_value_heads], dim=-2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.use_qk_norm:
            q, k = self.query_layernorm(q), self.key_layernorm(k)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        groups = self.num_heads // self.num_key_value_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # repeat_kv
        weights = torch.matmul(q, k.transpose(2, 3)) * self.scaling + attention_mask
        weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.dense(out)


class LLaDA2MoeDecoderLayer(nn.Module):
    def __init__(self, c: dict, layer_idx: int):
        super().__init__()
        self.attention = LLaDA2MoeAttention(c)
        sparse = c.get("num_experts") is not None and layer_idx >= c.get("first_k_dense_replace", 0)
        self.mlp = LLaDA2MoeSparseMoeBlock(c) if sparse else LLaDA2MoeMLP(c, c["intermediate_size"])
        self.input_layernorm = LLaDA2MoeRMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = LLaDA2MoeRMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, hidden_states, attention_mask, cos, sin):
        hidden_states = hidden_states + self.attention(self.input_layernorm(hidden_states), attention_mask, cos, sin)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class LLaDA2MoeModel(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(LLaDA2MoeDecoderLayer(c, i) for i in range(c["num_hidden_layers"]))
        self.norm = LLaDA2MoeRMSNorm(c["hidden_size"], c["rms_norm_eps"])


class LLaDA2MoeModelLM(nn.Module):
    """config.json (a dict) -> the published module tree; forward(input_ids, 4D additive mask,
    position_ids) -> float logits, in place (LLaDA2 "uses same label position logits")."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = config
        self.model = LLaDA2MoeModel(config)
        self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)

    @torch.no_grad()
    def forward(self, input_ids, attention_mask, position_ids):
        h = self.model.word_embeddings(input_ids)
        cos, sin = rotary(self.config, position_ids)
        for layer in self.model.layers:
            h = layer(h, attention_mask, cos, sin)
        return self.lm_head(self.model.norm(h)).float()


def block_diffusion_mask(keep: torch.Tensor, block_length: int) -> torch.Tensor:
    """The additive [B, 1, L, L] mask LLaDA2's generate builds (log of a block lower-triangular matrix:
    0 where a query's block is the key's or later, -inf elsewhere), blocks counted from position 0, with
    padding keys (keep False) left out; positions count real tokens only."""
    positions = keep.long().cumsum(-1) - 1
    blocks = positions.clamp(min=0) // block_length
    seen = (blocks[:, None, :] <= blocks[:, :, None]) & keep[:, None, :]
    return torch.zeros(seen.shape, dtype=torch.float32).masked_fill(~seen, float("-inf"))[:, None]
