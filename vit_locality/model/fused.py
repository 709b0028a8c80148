"""Cells of one shape trained as one program (horizontal fusion, as HFTA): every parameter of the ViT gains a
leading cell axis and every operator becomes its batched form, so C cells cost one kernel launch per operator
instead of C. Cell c of a FusedViT computes what VisionTransformer c computes; its state dict, taken apart with
`cell_state_dict`, is one a lone VisionTransformer loads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vit_locality.augment.mixing import one_hot_rows
from vit_locality.catalog import GRID_SIZE
from vit_locality.model.classifier import ViTClassifier, adamw_with_decay_groups
from vit_locality.model.vit import VisionTransformer


def _per_cell(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(C, n) values shaped to broadcast over `like` (C, ..., n)."""
    return values.view(values.shape[0], *([1] * (like.ndim - 2)), values.shape[-1])


class CellLinear(nn.Module):
    """C linear layers as one batched matmul: weight (C, out, in), bias (C, out); input (C, ..., in)."""

    def __init__(self, cells: int, inputs: int, outputs: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cells, outputs, inputs))
        self.bias = nn.Parameter(torch.empty(cells, outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(x.shape[0], -1, x.shape[-1])
        out = torch.baddbmm(self.bias.unsqueeze(1), rows, self.weight.transpose(1, 2))
        return out.view(*x.shape[:-1], self.weight.shape[1])


class CellLayerNorm(nn.Module):
    """C LayerNorms: one normalisation, then each cell's own scale and shift."""

    def __init__(self, cells: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cells, dim))
        self.bias = nn.Parameter(torch.empty(cells, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.layer_norm(x, x.shape[-1:], eps=1e-5)
        return torch.addcmul(_per_cell(self.bias, x), normed, _per_cell(self.weight, x))


class CellAttention(nn.Module):
    """Multi-head self-attention of C cells: one scaled_dot_product_attention with the cells folded into the batch."""

    def __init__(self, cells: int, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = CellLinear(cells, dim, 3 * dim)
        self.proj = CellLinear(cells, dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cells, batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(cells * batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(cells, batch, tokens, dim))


class CellBlock(nn.Module):
    """The pre-norm block x + Attn(LN(x)), x + MLP(LN(x)) of C cells."""

    def __init__(self, cells: int, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = CellLayerNorm(cells, dim)
        self.attn = CellAttention(cells, dim, heads)
        self.norm2 = CellLayerNorm(cells, dim)
        self.mlp = nn.Sequential(CellLinear(cells, dim, hidden), nn.GELU(), CellLinear(cells, hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class FusedViT(nn.Module):
    """C VisionTransformers of one architecture (patch stem, no stochastic depth) with a leading cell axis.

    Its parameters carry the lone model's names, so `cell_state_dict(c)` is a VisionTransformer's state dict."""

    def __init__(
        self,
        cells: int,
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
        if stem != "patch" or drop_path:
            raise ValueError(
                f"a pack fuses the patch stem without stochastic depth: model.stem={stem!r}, "
                f"model.drop_path={drop_path} train one cell at a time"
            )
        self.cells, self.grid_size = cells, grid_size
        self.patch_size = image_size // grid_size
        tokens = 1 + grid_size * grid_size
        self.patch_embed = CellLinear(cells, 3 * self.patch_size**2, dim)
        self.cls_token = nn.Parameter(torch.zeros(cells, 1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(cells, 1, tokens, dim))
        self.blocks = nn.ModuleList(CellBlock(cells, dim, heads, mlp_ratio) for _ in range(depth))
        self.norm = CellLayerNorm(cells, dim)
        self.head = CellLinear(cells, dim, num_classes)

    def no_weight_decay(self) -> set[str]:
        """What AdamW leaves undecayed besides biases and norms: the lone model's."""
        return VisionTransformer.no_weight_decay(self)  # type: ignore[arg-type]

    def load_cells(self, states: Sequence[Mapping[str, torch.Tensor]]) -> None:
        """Stack the lone models' state dicts, cell c from states[c] (its own initialisation, or a checkpoint)."""
        if len(states) != self.cells:
            raise ValueError(f"a pack of {self.cells} cells got {len(states)} state dicts")
        own = self.state_dict()
        stacked = {name: torch.stack([state[name].reshape(own[name].shape[1:]) for state in states]) for name in own}
        self.load_state_dict(stacked)

    def cell_state_dict(self, cell: int) -> dict[str, torch.Tensor]:
        """Cell `cell`'s parameters under a VisionTransformer's names and shapes (its patch stem as a Conv2d)."""
        state = {name: value[cell].clone() for name, value in self.state_dict().items()}
        dim, patch = state["patch_embed.weight"].shape[0], self.patch_size
        state["patch_embed.weight"] = state["patch_embed.weight"].view(dim, 3, patch, patch)
        return state

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised float images (C, B, 3, H, W) -> logits (C, B, classes)."""
        cells, batch, channels, _, _ = images.shape
        grid, patch = self.grid_size, self.patch_size
        patches = images.reshape(cells, batch, channels, grid, patch, grid, patch).permute(0, 1, 3, 5, 2, 4, 6)
        tokens = self.patch_embed(patches.reshape(cells, batch, grid * grid, channels * patch * patch))
        cls = self.cls_token.expand(cells, batch, 1, tokens.shape[-1])
        x = torch.cat([cls, tokens], dim=2) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, :, 0])


def smoothed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, smoothing: torch.Tensor) -> torch.Tensor:
    """Each cell's mean cross-entropy (C,), targets (C, B, K) probabilities smoothed by the cell's own epsilon (C,),
    as F.cross_entropy(label_smoothing=epsilon) smooths them."""
    classes = logits.shape[-1]
    eps = smoothing.view(-1, 1, 1).to(logits.dtype)
    smoothed = targets * (1.0 - eps) + eps / classes
    return -(smoothed * logits.log_softmax(dim=-1)).sum(dim=-1).mean(dim=-1)


def fused_adamw(model: FusedViT, lr: float, weight_decay: float, betas: tuple[float, float]) -> torch.optim.AdamW:
    """One AdamW over the stacked parameters, each cell's own (the update is elementwise), decaying what the lone
    model decays; foreach: one kernel per operation for all parameters, the path a lone cell's AdamW takes on a GPU."""
    return adamw_with_decay_groups(model, lr, weight_decay, betas, cell_axes=1, foreach=True)


def clip_per_cell(parameters: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale each cell's gradients to at most `max_norm` (2-norm over that cell's slices), as
    torch.nn.utils.clip_grad_norm_ does for a lone model; returns each cell's norm before clipping (C,)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = torch.stack([g.flatten(1).square().sum(dim=1) for g in grads]).sum(dim=0).sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale.view(-1, *([1] * (grad.ndim - 1))))
    return norms


def pack_loss(
    model: FusedViT,
    cells: Sequence[ViTClassifier],
    images: torch.Tensor,
    labels: torch.Tensor,
    smoothing: torch.Tensor,
    reseed: Callable[[int], None],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each cell's loss (C,), logits (C, B, K) and accuracy labels (C, B) on its own uint8 batch images[c].

    Cell c's batch goes through its own ViTClassifier's protocol (augmentation on the device, mixing) after
    `reseed(c)` seeds torch's generator as the lone cell's batch would be: the draws are the lone cell's."""
    inputs, targets, references = [], [], []
    for index, cell in enumerate(cells):
        reseed(index)
        mixed, target, reference = cell.protocol_batch(images[index], labels[index])
        if target.ndim == 1:  # not mixed: class indices
            target = one_hot_rows(target, cell.num_classes)
        inputs.append(cell.preprocess(mixed))
        targets.append(target)
        references.append(reference)
    logits = model(torch.stack(inputs))
    return smoothed_cross_entropy(logits, torch.stack(targets), smoothing), logits, torch.stack(references)
