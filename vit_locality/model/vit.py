"""The study's compact pre-norm ViT: `forward` on the fused attention path, `forward_with_attention` on the explicit
fp32 one that returns the probabilities; its keyword arguments are `settings.model.architecture()`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import stochastic_depth

from vit_locality.catalog import GRID_SIZE

# Frequencies from 1 towards 1/SINCOS_BASE radian per patch: 10,000 would leave most channels of 8 patches flat.
SINCOS_BASE = 100.0


def sincos_position_code(dim: int, grid_size: int, base: float = SINCOS_BASE) -> torch.Tensor:
    """(1 + g*g, dim) start of the learned positions: a zero CLS row, then per patch sin and cos of its row and column
    index, a quarter of the channels each, at frequencies spaced geometrically from 1 towards 1/base."""
    if dim % 4:
        raise ValueError(f"model.dim={dim}: a sine-cosine position code needs a multiple of 4")
    quarter = dim // 4
    frequencies = base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid_size), torch.arange(grid_size), indexing="ij")
    row_angles = rows.flatten().double()[:, None] * frequencies
    col_angles = cols.flatten().double()[:, None] * frequencies
    code = torch.cat([row_angles.sin(), row_angles.cos(), col_angles.sin(), col_angles.cos()], dim=1)
    return torch.cat([torch.zeros(1, dim, dtype=torch.float64), code]).float()


class Attention(nn.Module):
    """Multi-head self-attention with a single qkv projection (with bias)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim)
        self.attn_mask: torch.Tensor | None
        self.register_buffer("attn_mask", None, persistent=False)  # set by restrict_attention; not in state dicts

    def _merge_heads(self, out: torch.Tensor) -> torch.Tensor:
        batch, heads, tokens, head_dim = out.shape
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, heads * head_dim))

    def forward(self, x: torch.Tensor, explicit: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention output, and on the explicit path the (B, heads, T, T) fp32 probabilities (else None)."""
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # unbind, not indexing: indexing makes backward zero-fill 3 full-size grads
        mask = self.attn_mask
        if not explicit:
            return self._merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), None
        # Autocast would turn these matmuls back into bf16: switch it off so the maps are truly fp32.
        with torch.autocast(device_type=x.device.type, enabled=False):
            scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(self.head_dim)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = scores.softmax(dim=-1)
            out = (probs @ v.float()).to(v.dtype)
        return self._merge_heads(out), probs


class Block(nn.Module):
    """Pre-norm block x + Attn(LN(x)), x + MLP(LN(x)); `drop_path` > 0 is stochastic depth per image (as DeiT)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, drop_path: float = 0.0) -> None:
        super().__init__()
        self.drop_path = drop_path
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor, explicit: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        attn_out, probs = self.attn(self.norm1(x), explicit)
        x = x + self._dropped(attn_out)
        return x + self._dropped(self.mlp(self.norm2(x))), probs

    def _dropped(self, branch: torch.Tensor) -> torch.Tensor:
        return stochastic_depth(branch, self.drop_path, "row", self.training) if self.drop_path else branch


def neighbourhood_attention_mask(grid_size: int, radius: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(1 + g*g, 1 + g*g) mask, True where a query may attend: patches within `radius` steps (CLS query: all)."""
    if not isinstance(radius, int) or isinstance(radius, bool) or radius < 0:
        raise ValueError(f"attention radius must be an int >= 0 (0: each patch attends to itself), got {radius!r}")
    idx = torch.arange(grid_size * grid_size, device=device)
    rows, cols = idx // grid_size, idx % grid_size
    chebyshev = torch.maximum((rows[:, None] - rows[None, :]).abs(), (cols[:, None] - cols[None, :]).abs())
    mask = torch.ones(1 + grid_size * grid_size, 1 + grid_size * grid_size, dtype=torch.bool, device=device)
    mask[1:, 0] = False
    mask[1:, 1:] = chebyshev <= radius
    return mask


def conv_stem(dim: int, patch_size: int) -> nn.Sequential:
    """A stride-2 3 x 3 conv, BatchNorm and ReLU per halving of the patch, then a 1 x 1 conv (Xiao et al., 2021)."""
    halvings = patch_size.bit_length() - 1
    if patch_size < 2 or 1 << halvings != patch_size:
        raise ValueError(f"the conv stem needs a patch size that is a power of 2 (>= 2), got {patch_size}")
    layers: list[nn.Module] = []
    channels = 3
    for step in range(halvings):
        width = max(16, dim // 2 ** (halvings - step))
        layers += [nn.Conv2d(channels, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
        channels = width
    layers.append(nn.Conv2d(channels, dim, kernel_size=1))
    return nn.Sequential(*layers)


class VisionTransformer(nn.Module):
    """ViT classifier on a fixed 8 x 8 patch grid (patch = image size / 8), CLS token, learned positions."""

    def __init__(
        self,
        num_classes: int,
        image_size: int = 32,
        depth: int = 8,
        dim: int = 192,
        heads: int = 8,
        mlp_ratio: float = 2.0,
        grid_size: int = GRID_SIZE,
        stem: str = "patch",
        pos_init: str = "learned",
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        self.pos_init = pos_init
        self.grid_size = grid_size
        self.patch_size = image_size // grid_size
        self.num_tokens = 1 + grid_size * grid_size
        if stem == "conv":
            self.patch_embed: nn.Module = conv_stem(dim, self.patch_size)
        else:
            self.patch_embed = nn.Conv2d(3, dim, kernel_size=self.patch_size, stride=self.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_tokens, dim))
        # Stochastic depth grows linearly with depth, from 0 at the first block to `drop_path` at the last (DeiT).
        rates = torch.linspace(0, drop_path, depth).tolist() if depth > 1 else [drop_path]
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, rate) for rate in rates)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self._init_weights()

    def restrict_attention(self, radius: int | None) -> None:
        """Restrict attention to `radius` steps (None lifts it) on both paths: the known-answer references use it."""
        mask = None if radius is None else neighbourhood_attention_mask(self.grid_size, radius, self.pos_embed.device)
        for block in self.blocks:
            block.attn.attn_mask = mask

    def no_weight_decay(self) -> set[str]:
        """Parameters AdamW leaves undecayed besides biases and norms (decay would pull positions together)."""
        return {"cls_token", "pos_embed"}

    def _init_weights(self) -> None:
        if self.pos_init == "sincos":
            with torch.no_grad():
                self.pos_embed.copy_(sincos_position_code(self.pos_embed.shape[-1], self.grid_size)[None])
        else:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm | nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised float images (B, 3, H, W) -> token sequence (B, 1 + g*g, dim)."""
        patches = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(len(patches), -1, -1)
        return torch.cat([cls, patches], dim=1) + self.pos_embed

    def classify(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(tokens)[:, 0])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits, on the fused attention path (training, evaluation)."""
        x = self.embed(images)
        for block in self.blocks:
            x, _ = block(x)
        return self.classify(x)

    def forward_with_attention(self, images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits plus each layer's fp32 attention probabilities (B, heads, 1 + g*g, 1 + g*g), on the explicit path."""
        x = self.embed(images)
        maps = []
        for block in self.blocks:
            x, probs = block(x, explicit=True)
            maps.append(probs)
        return self.classify(x), maps


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
