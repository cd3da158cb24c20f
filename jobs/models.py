"""The four seed examples' models, in plain ``torch.nn`` (no torchvision: it is not in every image).

* ``vit``        LUMI's visual-transformer example: patch embedding, class token, learned position
                 embedding, pre-norm transformer encoder, linear head.
* ``wideresnet`` Olivia's CIFAR-100 WideResNet, here the standard WRN-depth-width of Zagoruyko &
                 Komodakis (pre-activation basic blocks, widths 16k/32k/64k, depth = 6n + 4).
* ``cnn``        CSC's MNIST ConvNet: two 5x5 conv + BatchNorm + ReLU + max-pool stages, one linear.
* ``resnet``     NCAR's ResNet: ResNet-18/34 basic blocks with a 3x3 stem and no max-pool, the usual
                 adaptation to 32x32 inputs.

Every model takes any ``(channels, height, width)`` input shape (the classifier sits behind an
adaptive pool or a shape computed at construction), so each runs on CIFAR-100 (3x32x32) and on
MNIST (1x28x28).  ``--model-size`` picks a preset: ``tiny`` is for tests on CPU (seconds per
epoch), ``small`` is the published shape (CSC's ConvNet, WRN-16-4, ResNet-18, a ViT-Tiny-like
transformer), ``base`` is larger.  WideResNet also takes ``DEPTH-WIDTH`` (``28-10``).

Each model lists its ``fsdp_units``: the submodules worth sharding as their own FSDP unit (the
residual blocks, the transformer layers), so FSDP all-gathers one block at a time rather than
the whole model at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

import choices

MODEL_NAMES = choices.MODELS
SIZES = choices.MODEL_SIZES
WRN_SIZE_RE = re.compile(choices.WIDERESNET_SIZE)


@dataclass(frozen=True)
class InputSpec:
    """What the model is fed: image channels and side lengths, and the number of classes."""

    channels: int
    height: int
    width: int
    classes: int


# ----------------------------------------------------------------------------------------------
# Vision transformer (LUMI)
# ----------------------------------------------------------------------------------------------

VIT_PRESETS = {  # patch, dim, depth, heads, mlp
    "tiny": (4, 64, 2, 4, 128),
    "small": (4, 192, 6, 3, 768),
    "base": (4, 384, 12, 6, 1536),
}


class VisionTransformer(nn.Module):
    """ViT: conv patch embedding, [CLS] token, learned positions, pre-norm encoder layers."""

    def __init__(self, spec: InputSpec, patch: int, dim: int, depth: int, heads: int,
                 mlp_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        if spec.height % patch or spec.width % patch:
            raise ValueError(f"image {spec.height}x{spec.width} is not divisible into "
                             f"{patch}x{patch} patches")
        patches = (spec.height // patch) * (spec.width // patch)
        self.patch_embed = nn.Conv2d(spec.channels, dim, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, patches + 1, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        # A ModuleList of layers rather than nn.TransformerEncoder: the latter warns about nested
        # tensors with norm_first, and FSDP wants the layers as separate units anyway.
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, dim_feedforward=mlp_dim, dropout=dropout,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, spec.classes)

    @property
    def fsdp_units(self) -> list[nn.Module]:
        return list(self.blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, patches, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


# ----------------------------------------------------------------------------------------------
# WideResNet (Olivia)
# ----------------------------------------------------------------------------------------------

WRN_PRESETS = {"tiny": (10, 1), "small": (16, 4), "base": (28, 10)}


class WideBasicBlock(nn.Module):
    """Pre-activation block: BN-ReLU-conv3x3-BN-ReLU-conv3x3, 1x1 conv shortcut on shape change."""

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(x))
        skip = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(self.dropout(torch.relu(self.bn2(out))))
        return out + skip


class BlockStack(nn.Module):
    """A stem, residual blocks (each its own FSDP unit), global average pool, linear head."""

    stem: nn.Module
    blocks: nn.ModuleList
    head: nn.Linear

    @property
    def fsdp_units(self) -> list[nn.Module]:
        return list(self.blocks)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """What the last block's output goes through before pooling."""
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.finish(x), 1), 1))


class WideResNet(BlockStack):
    """WRN-depth-width: three groups of (depth-4)/6 blocks at widths 16k, 32k, 64k."""

    def __init__(self, spec: InputSpec, depth: int, width: int, dropout: float = 0.0) -> None:
        super().__init__()
        if depth < 10 or (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6n+4 with n >= 1 (10, 16, 22, 28, ...), "
                             f"got {depth}")
        if width < 1:
            raise ValueError(f"WideResNet width must be >= 1, got {width}")
        per_group = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        self.stem = nn.Conv2d(spec.channels, widths[0], 3, padding=1, bias=False)
        blocks = []
        in_planes = widths[0]
        for group, planes in enumerate(widths[1:]):
            for index in range(per_group):
                stride = 2 if group > 0 and index == 0 else 1
                blocks.append(WideBasicBlock(in_planes, planes, stride, dropout))
                in_planes = planes
        self.blocks = nn.ModuleList(blocks)
        self.bn = nn.BatchNorm2d(in_planes)
        self.head = nn.Linear(in_planes, spec.classes)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(x))  # pre-activation blocks leave the last BN-ReLU to here


# ----------------------------------------------------------------------------------------------
# ConvNet (CSC)
# ----------------------------------------------------------------------------------------------

CNN_PRESETS = {"tiny": (8, 16), "small": (16, 32), "base": (32, 64)}


class ConvNet(nn.Module):
    """CSC's MNIST ConvNet: (conv5x5, BN, ReLU, max-pool 2) x 2, then one linear layer."""

    def __init__(self, spec: InputSpec, channels: tuple[int, int]) -> None:
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(spec.channels, c1, 5, padding=2), nn.BatchNorm2d(c1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5, padding=2), nn.BatchNorm2d(c2), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.fc = nn.Linear(c2 * (spec.height // 4) * (spec.width // 4), spec.classes)

    @property
    def fsdp_units(self) -> list[nn.Module]:
        return []  # small enough to be one unit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


# ----------------------------------------------------------------------------------------------
# ResNet (NCAR)
# ----------------------------------------------------------------------------------------------

RESNET_PRESETS = {  # blocks per stage, base width
    "tiny": ((1, 1, 1, 1), 16),
    "small": ((2, 2, 2, 2), 64),   # ResNet-18
    "base": ((3, 4, 6, 3), 64),    # ResNet-34
}


class BasicBlock(nn.Module):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN plus (projected) identity, then ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(BlockStack):
    """ResNet for small images: 3x3 stem without max-pool, four stages, global average pool."""

    def __init__(self, spec: InputSpec, stages: tuple[int, ...], width: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(spec.channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU())
        blocks = []
        in_planes = width
        for stage, count in enumerate(stages):
            planes = width * 2**stage
            for index in range(count):
                blocks.append(BasicBlock(in_planes, planes, 2 if stage > 0 and index == 0 else 1))
                in_planes = planes
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(in_planes, spec.classes)


# ----------------------------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------------------------


def _vit(spec: InputSpec, size: str) -> nn.Module:
    patch, dim, depth, heads, mlp = VIT_PRESETS[_preset(size, "vit")]
    return VisionTransformer(spec, patch, dim, depth, heads, mlp)


def _wideresnet(spec: InputSpec, size: str) -> nn.Module:
    match = WRN_SIZE_RE.match(size)
    depth, width = (int(match.group(1)), int(match.group(2))) if match \
        else WRN_PRESETS[_preset(size, "wideresnet")]
    return WideResNet(spec, depth, width)


def _cnn(spec: InputSpec, size: str) -> nn.Module:
    return ConvNet(spec, CNN_PRESETS[_preset(size, "cnn")])


def _resnet(spec: InputSpec, size: str) -> nn.Module:
    stages, width = RESNET_PRESETS[_preset(size, "resnet")]
    return ResNet(spec, stages, width)


def _preset(size: str, model: str) -> str:
    return choices.check_model_size(model, size)


BUILDERS: dict[str, Callable[[InputSpec, str], nn.Module]] = {
    "vit": _vit, "wideresnet": _wideresnet, "cnn": _cnn, "resnet": _resnet,
}


def build_model(name: str, spec: InputSpec, size: str = "small") -> nn.Module:
    """The named model for inputs shaped like ``spec``; ValueError for an unknown name or size."""
    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}: use one of {', '.join(MODEL_NAMES)}")
    return BUILDERS[name](spec, size)


def describe_model(name: str, size: str) -> str:
    """A short human name for reports, e.g. ``WRN-16-4`` or ``ResNet-18``."""
    if name == "wideresnet":
        match = WRN_SIZE_RE.match(size)
        depth, width = (int(match.group(1)), int(match.group(2))) if match else WRN_PRESETS[size]
        return f"WRN-{depth}-{width}"
    if name == "resnet":
        stages, width = RESNET_PRESETS[size]
        layers = 2 * sum(stages) + 2
        return f"ResNet-{layers}" + ("" if width == 64 else f" (width {width})")
    if name == "vit":
        patch, dim, depth, heads, _mlp = VIT_PRESETS[size]
        return f"ViT {size} (patch {patch}, dim {dim}, depth {depth}, heads {heads})"
    c1, c2 = CNN_PRESETS[size]
    return f"ConvNet {c1}/{c2}"


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
