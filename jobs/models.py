"""The four seed examples' models, in plain ``torch.nn`` (no torchvision: it is not in every image).

Each site's published network is one ``--model-size`` of its model, exactly (layer for layer,
parameter for parameter; ``tests/jobs/test_models.py`` pins the counts):

* ``vit``        LUMI's visual-transformer example (LUMI-AI-Guide ``05-multi-gpu-and-node/
                 ds_visiontransformer.py``, LUMI-AI-example ``ds_visualtransformer.py``) trains
                 torchvision's ``vit_b_16``: ``lumi`` is that shape (patch 16, dim 768, depth 12,
                 heads 12, MLP 3072; 86,567,656 parameters at 224x224 and 1000 classes).  On
                 CIFAR-sized 32x32 inputs it sees 4 patches, not LUMI's 196: the same weights, a
                 much lighter workload.  The presets are smaller ViTs of the same architecture
                 (conv patch embedding, class token, learned positions, pre-norm encoder layers,
                 LayerNorm eps 1e-6 as torchvision's, linear head) with 4x4 patches.
* ``wideresnet`` ``olivia`` is Olivia's CIFAR-100 WideResNet as Sigma2's PyTorch-on-Olivia guide
                 publishes it (``code_development/guides/pytorch_olivia/PyTorchSingleGpu.md``,
                 ``model.py``): widths 16/160/320/640, two conv blocks per stage, max-pooling
                 between stages, a fixed 7x7 average pool; its parameter names are the guide's, so
                 the guide's checkpoints load.  The presets and ``DEPTH-WIDTH`` are the standard
                 WRN of Zagoruyko & Komodakis (pre-activation blocks, strided downsampling), which
                 Olivia's network is not (WRN-16-10 is the closest in size).
* ``cnn``        CSC's MNIST ConvNet (CSCfi/pytorch-ddp-examples ``mnist_ddp.py``): two 5x5 conv +
                 BatchNorm + ReLU + max-pool stages, one linear layer; ``small`` is it exactly
                 (16 and 32 channels, FC 7*7*32 -> 10 on MNIST).
* ``resnet``     NCAR's ResNet (negin513/distributed-pytorch-hpc ``scripts/02_fully_sharded_fsdp/
                 resnet_fsdp_training.py``): torchvision's ``resnet18`` with a 3x3 stem and no
                 max-pool, the usual adaptation to 32x32 inputs; ``small`` is it exactly
                 (ResNet-18), ``base`` is ResNet-34.

The presets take any ``(channels, height, width)`` input shape (the classifier sits behind an
adaptive pool or a shape computed at construction), so each runs on CIFAR-100 (3x32x32) and on
MNIST (1x28x28); the seed networks keep their published quirks (Olivia's fixed 7x7 pool needs
28 to 55 pixels a side, ViT-B/16 sides divisible by 16).  ``tiny`` is for tests on CPU (seconds
per epoch), ``small`` the published shape where one is a preset, ``base`` larger.

Each model lists its ``fsdp_units``: the submodules worth sharding as their own FSDP unit (the
residual blocks, the transformer layers), so FSDP all-gathers one block at a time rather than
the whole model at once.

Also here, as data for ``train.py`` to print or apply: :data:`PRESET_DEFAULTS` (the batch size
and optimizer a seed's guide trains with) and :func:`published_figures` (the throughput a site
publishes for its network, for comparison; never a pass criterion).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

import choices

MODEL_NAMES = choices.MODELS


@dataclass(frozen=True)
class InputSpec:
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
    "lumi": (16, 768, 12, 12, 3072),  # torchvision vit_b_16, as LUMI's example trains it
}
VIT_LAYER_NORM_EPS = 1e-6  # torchvision's ViT (and the original's); torch's layers default 1e-5


class VisionTransformer(nn.Module):
    """ViT: conv patch embedding, [CLS] token, learned positions, pre-norm encoder layers."""

    def __init__(self, spec: InputSpec, patch: int, dim: int, depth: int, heads: int,
                 mlp_dim: int) -> None:
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
            nn.TransformerEncoderLayer(dim, heads, dim_feedforward=mlp_dim, dropout=0.0,
                                       activation="gelu", layer_norm_eps=VIT_LAYER_NORM_EPS,
                                       batch_first=True, norm_first=True)
            for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=VIT_LAYER_NORM_EPS)
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
# WideResNet: the standard WRN (presets, DEPTH-WIDTH) and Olivia's own network (olivia)
# ----------------------------------------------------------------------------------------------

WRN_PRESETS = {"tiny": (10, 1), "small": (16, 4), "base": (28, 10)}


class WideBasicBlock(nn.Module):
    """Pre-activation block: BN-ReLU-conv3x3-BN-ReLU-conv3x3, 1x1 conv shortcut on shape change."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(x))
        skip = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(torch.relu(self.bn2(out)))
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

    def stack(self, make_block: Callable[[int, int, int], nn.Module], in_planes: int,
              stages: list[tuple[int, int]]) -> int:
        """``blocks``: for each (width, count) stage, ``count`` blocks ``make_block(in, out,
        stride)``, the first of each stage after the first striding 2; the last width."""
        blocks = []
        for stage, (planes, count) in enumerate(stages):
            for index in range(count):
                blocks.append(make_block(in_planes, planes, 2 if stage > 0 and index == 0 else 1))
                in_planes = planes
        self.blocks = nn.ModuleList(blocks)
        return in_planes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.finish(x), 1), 1))


class WideResNet(BlockStack):
    """WRN-depth-width: three groups of (depth-4)/6 blocks at widths 16k, 32k, 64k (Zagoruyko &
    Komodakis); not Olivia's network, which is :class:`OliviaWideResNet`."""

    def __init__(self, spec: InputSpec, depth: int, width: int) -> None:
        super().__init__()
        if depth < 10 or (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6n+4 with n >= 1 (10, 16, 22, 28, ...), "
                             f"got {depth}")
        if width < 1:
            raise ValueError(f"WideResNet width must be >= 1, got {width}")
        per_group = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        self.stem = nn.Conv2d(spec.channels, widths[0], 3, padding=1, bias=False)
        in_planes = self.stack(WideBasicBlock, widths[0],
                               [(planes, per_group) for planes in widths[1:]])
        self.bn = nn.BatchNorm2d(in_planes)
        self.head = nn.Linear(in_planes, spec.classes)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(x))  # pre-activation blocks leave the last BN-ReLU to here


class CBRBlock(nn.Module):
    """Olivia's ``cbrblock``: conv3x3 ('same' padding, no bias), BatchNorm, ReLU.

    Kept as a ``cbr`` Sequential, as published, so that parameter names match the guide's.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.cbr = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding="same", bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cbr(x)


class OliviaBlock(nn.Module):
    """Olivia's ``conv_block``: cbr, Dropout(0.01), cbr, plus the input; where the width changes
    (the guide's ``scale_input``) the input goes through a 1x1 conv, with a bias as published."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.scale = nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels \
            else None
        self.layer1 = CBRBlock(in_channels, out_channels)
        self.dropout = nn.Dropout(p=0.01)
        self.layer2 = CBRBlock(out_channels, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer2(self.dropout(self.layer1(x)))
        return out + (x if self.scale is None else self.scale(x))


class OliviaWideResNet(nn.Module):
    """Olivia's WideResNet, layer for layer and name for name as the guide's ``model.py``.

    input cbr -> 16, blocks 16->160, 160->160, max-pool, 160->320, 320->320, max-pool,
    320->640, 640->640, AvgPool2d(7), flatten, linear.  The 7x7 average pool is fixed, not
    global: on 32x32 CIFAR images it averages the top-left 7x7 of the 8x8 map, as published.
    """

    def __init__(self, spec: InputSpec) -> None:
        super().__init__()
        for side in (spec.height, spec.width):
            if not 7 <= side // 4 <= 13:  # two 2x2 max-pools, then the fixed 7x7 pool to 1x1
                raise ValueError(f"Olivia's WideResNet takes images of 28 to 55 pixels a side "
                                 f"(its fixed 7x7 average pool must leave 1x1), got "
                                 f"{spec.height}x{spec.width}")
        stem, narrow, middle, wide = 16, 160, 320, 640  # the guide's nChannels
        self.input_block = CBRBlock(spec.channels, stem)
        self.block1 = OliviaBlock(stem, narrow)
        self.block2 = OliviaBlock(narrow, narrow)
        self.pool1 = nn.MaxPool2d(2)
        self.block3 = OliviaBlock(narrow, middle)
        self.block4 = OliviaBlock(middle, middle)
        self.pool2 = nn.MaxPool2d(2)
        self.block5 = OliviaBlock(middle, wide)
        self.block6 = OliviaBlock(wide, wide)
        self.pool = nn.AvgPool2d(7)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(wide, spec.classes)

    @property
    def fsdp_units(self) -> list[nn.Module]:
        return [self.block1, self.block2, self.block3, self.block4, self.block5, self.block6]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.block2(self.block1(self.input_block(x))))
        x = self.pool2(self.block4(self.block3(x)))
        x = self.block6(self.block5(x))
        return self.fc(self.flat(self.pool(x)))


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
        in_planes = self.stack(BasicBlock, width,
                               [(width * 2**stage, count) for stage, count in enumerate(stages)])
        self.head = nn.Linear(in_planes, spec.classes)


# ----------------------------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------------------------


def _wrn_shape(size: str) -> tuple[int, int]:
    """(depth, width) of a WRN preset or ``DEPTH-WIDTH`` size."""
    match = re.match(choices.WIDERESNET_SIZE, size)
    return (int(match.group(1)), int(match.group(2))) if match else WRN_PRESETS[size]


def build_model(name: str, spec: InputSpec, size: str = "small") -> nn.Module:
    """The named model for inputs shaped like ``spec``; ValueError for an unknown name or size."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}: use one of {', '.join(MODEL_NAMES)}")
    choices.check_model_size(name, size)
    if name == "vit":
        return VisionTransformer(spec, *VIT_PRESETS[size])
    if name == "cnn":
        return ConvNet(spec, CNN_PRESETS[size])
    if name == "resnet":
        return ResNet(spec, *RESNET_PRESETS[size])
    return OliviaWideResNet(spec) if size == "olivia" else WideResNet(spec, *_wrn_shape(size))


#: Where each seed network comes from, by (model, size): what the header names.
SOURCES: dict[tuple[str, str], str] = {
    ("vit", "lumi"): "LUMI ViT-B/16 (torchvision vit_b_16 as LUMI-AI-Guide "
                     "05-multi-gpu-and-node/ds_visiontransformer.py trains it)",
    ("wideresnet", "olivia"): "Olivia WideResNet (Sigma2 PyTorch-on-Olivia guide, "
                              "PyTorchSingleGpu.md model.py)",
    ("cnn", "small"): "CSC MNIST ConvNet (CSCfi/pytorch-ddp-examples mnist_ddp.py)",
    ("resnet", "small"): "NCAR ResNet-18 (negin513/distributed-pytorch-hpc "
                         "resnet_fsdp_training.py)",
}

#: The seed guides' training settings (kept in ``choices`` so the host reads them too).
PRESET_DEFAULTS = choices.PRESET_DEFAULTS

FIGURES: dict[tuple[str, str], tuple[str, ...]] = {
    ("wideresnet", "olivia"): (
        "~5,100 img/s FP32 on one GH200, batch 256 (PyTorchSingleGpu.md)",
        "37,244 img/s with mixed precision on 4 GH200 (PyTorchMultiGpu.md)",
        "63,190 img/s on 2x4 GH200 (PyTorchMultiNode.md)",
    ),
}


def published_figures(model: str, size: str) -> list[str]:
    """The throughput the seed's site publishes for this network, one line per figure, to print
    beside a run's own (never a pass criterion: other hardware, data pipeline and precision).

    Empty where the source publishes none: CSC's, NCAR's and LUMI's ViT examples print times,
    not a reference throughput.
    """
    return list(FIGURES.get((model, size), ()))


def describe_model(name: str, size: str, parameters: Optional[int] = None) -> str:
    """A human name for reports: the source for a seed's own network (``Olivia WideResNet
    (Sigma2 ...)``), else the shape (``WRN-16-4``, ``ConvNet 8/16``), so that a reader knows
    whether a figure is comparable with the site's; ``parameters`` appends the count."""
    described = SOURCES.get((name, size)) or _describe_shape(name, size)
    return described if parameters is None else f"{described}, {parameters:,} parameters"


def _describe_shape(name: str, size: str) -> str:
    if name == "wideresnet":
        depth, width = _wrn_shape(size)
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
    """All parameters, trainable or not (the guides print this sum)."""
    return sum(p.numel() for p in model.parameters())
