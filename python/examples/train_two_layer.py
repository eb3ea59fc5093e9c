"""Trains a two-layer attention model on the CPU for a few steps, with its
attention from ops_transformer (FlashAttention-2, forward and backward) or
from PyTorch's scaled_dot_product_attention, and prints each step's loss.

    python python/examples/train_two_layer.py [--steps N] [--sdpa]

The two runs start from the same weights and data, so their losses agree to
fp32 rounding (the package's tests check that).
"""

import argparse

import torch
import torch.nn.functional as F

import ops_transformer as ot


class Layer(torch.nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, use_ops_transformer: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.proj = torch.nn.Linear(dim, dim, bias=False)
        self.norm = torch.nn.RMSNorm(dim)
        self.use_ops_transformer = use_ops_transformer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim)
        k = k.view(b, s, self.kv_heads, self.head_dim)
        v = v.view(b, s, self.kv_heads, self.head_dim)
        if self.use_ops_transformer:
            a = ot.flash_attn_func(q, k, v, causal=True)  # [batch, seq, heads, dim], no copies
        else:
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True, enable_gqa=True).transpose(1, 2)
        return x + self.proj(a.reshape(b, s, -1))


def train(steps: int = 10, use_ops_transformer: bool = True, seed: int = 0) -> list:
    torch.manual_seed(seed)
    vocab, dim, seq, batch = 97, 64, 48, 4
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, dim),
                                Layer(dim, 4, 2, use_ops_transformer), Layer(dim, 4, 2, use_ops_transformer),
                                torch.nn.Linear(dim, vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, vocab, (batch, seq + 1))
    losses = []
    for _ in range(steps):
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), data[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sdpa", action="store_true", help="use PyTorch's SDPA instead of ops_transformer")
    args = parser.parse_args()
    for step, loss in enumerate(train(args.steps, not args.sdpa)):
        print(f"step {step}: loss {loss:.6f}")
