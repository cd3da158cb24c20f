"""jobs/models.py: the seeds' own networks, exactly as their sites publish them.

Each seed network is pinned by its exact parameter count (a wrong width, a missing bias or an
extra layer changes it), its output shape on the dataset it trains on, its FSDP units and the
source its description names.  The sources: Olivia's ``model.py`` in Sigma2's PyTorch-on-Olivia
guide, CSC's ``mnist_ddp.py``, NCAR's ``resnet_fsdp_training.py`` (torchvision's resnet18 with a
3x3 stem and no max-pool) and LUMI's ``ds_visiontransformer.py`` (torchvision's vit_b_16, whose
published count is 86,567,656).
"""

from __future__ import annotations

import pytest

from tests.jobs.scripts import script, sibling

torch = pytest.importorskip("torch")

choices, models = (sibling(name) for name in ("choices", "models"))

CIFAR100 = models.InputSpec(3, 32, 32, 100)
CIFAR10 = models.InputSpec(3, 32, 32, 10)
MNIST = models.InputSpec(1, 28, 28, 10)
IMAGENET = models.InputSpec(3, 224, 224, 1000)

OLIVIA_PARAMETERS = 17_175_444  # CIFAR-100, as the guide trains it

# The guide's model.py, name for name: its checkpoints load into ours.
OLIVIA_BLOCK_KEYS = ["layer1.cbr.0.weight", "layer1.cbr.1.weight", "layer1.cbr.1.bias",
                     "layer2.cbr.0.weight", "layer2.cbr.1.weight", "layer2.cbr.1.bias"]


def build(name: str, size: str, spec: models.InputSpec) -> torch.nn.Module:
    torch.manual_seed(0)
    return models.build_model(name, spec, size)


@pytest.mark.parametrize(("name", "size", "spec", "parameters"), [
    ("wideresnet", "olivia", CIFAR100, OLIVIA_PARAMETERS),
    ("wideresnet", "olivia", MNIST, 17_117_466),     # the guide's grayscale variant, 10 classes
    ("cnn", "small", MNIST, 29_034),                 # CSC: FC 7*7*32 -> 10
    ("resnet", "small", CIFAR10, 11_173_962),        # NCAR: ResNet-18 on CIFAR-10
    ("vit", "lumi", IMAGENET, 86_567_656),           # LUMI: torchvision vit_b_16's own count
])
def test_seed_networks_have_their_exact_parameter_counts(name, size, spec, parameters):
    assert models.count_parameters(build(name, size, spec)) == parameters


@pytest.mark.parametrize(("name", "size", "spec"), [
    ("wideresnet", "olivia", CIFAR100), ("wideresnet", "olivia", MNIST),
    ("cnn", "small", MNIST), ("resnet", "small", CIFAR10),
    ("vit", "lumi", CIFAR100),  # 4 patches of 16x16: runs, though LUMI's images are 224x224
])
def test_seed_networks_classify_a_batch_of_their_dataset(name, size, spec):
    model = build(name, size, spec)
    logits = model(torch.randn(2, spec.channels, spec.height, spec.width))
    assert logits.shape == (2, spec.classes)
    assert torch.isfinite(logits).all()


def test_olivia_layout_is_the_guides():
    model = build("wideresnet", "olivia", CIFAR100)
    blocks = [getattr(model, f"block{i}") for i in range(1, 7)]
    widths = [(16, 160), (160, 160), (160, 320), (320, 320), (320, 640), (640, 640)]
    for block, (width_in, width_out) in zip(blocks, widths, strict=True):
        first, second = block.layer1.cbr[0], block.layer2.cbr[0]
        assert (first.in_channels, first.out_channels) == (width_in, width_out)
        assert (second.in_channels, second.out_channels) == (width_out, width_out)
        for conv in (first, second):
            assert conv.kernel_size == (3, 3) and conv.padding == "same" and conv.bias is None
        assert block.dropout.p == 0.01
        # the 1x1 projection ("scale_input") exactly where the width changes, with its bias
        assert (block.scale is not None) == (width_in != width_out)
        if block.scale is not None:
            assert block.scale.kernel_size == (1, 1) and block.scale.bias is not None
    assert model.input_block.cbr[0].out_channels == 16
    assert [type(m).__name__ for m in (model.pool1, model.pool2, model.pool)] == \
        ["MaxPool2d", "MaxPool2d", "AvgPool2d"]
    assert model.pool.kernel_size == 7 and model.fc.in_features == 640
    keys = list(model.state_dict())
    assert keys[:2] == ["input_block.cbr.0.weight", "input_block.cbr.1.weight"]
    assert [k for k in keys if k.startswith("block2.") and "running" not in k
            and "num_batches" not in k] == [f"block2.{k}" for k in OLIVIA_BLOCK_KEYS]
    assert keys[-2:] == ["fc.weight", "fc.bias"]


@pytest.mark.parametrize(("name", "size", "spec", "message"), [
    ("wideresnet", "olivia", models.InputSpec(3, 64, 64, 100), "28 to 55 pixels a side"),
    ("wideresnet", "olivia", models.InputSpec(3, 16, 16, 100), "28 to 55 pixels a side"),
    ("vit", "lumi", MNIST, "not divisible into 16x16 patches"),
    ("cnn", "olivia", MNIST, "unknown size 'olivia' for model cnn"),
    ("vit", "olivia", CIFAR100, "unknown size 'olivia' for model vit"),
])
def test_seed_networks_refuse_what_they_cannot_take(name, size, spec, message):
    with pytest.raises(ValueError, match=message):
        models.build_model(name, spec, size)


def test_seed_sizes_are_accepted_where_the_host_checks():
    """The host checks --model-size with jobs/choices.py before anything starts."""
    assert choices.check_model_size("wideresnet", "olivia") == "olivia"
    assert choices.check_model_size("vit", "lumi") == "lumi"
    assert choices.model_sizes("wideresnet") == ("tiny", "small", "base", "olivia")
    assert choices.model_sizes("cnn") == choices.MODEL_SIZES
    with pytest.raises(ValueError, match="use one of tiny, small, base, olivia or DEPTH-WIDTH"):
        choices.check_model_size("wideresnet", "lumi")


@pytest.mark.parametrize(("name", "size", "spec", "source"), [
    ("wideresnet", "olivia", CIFAR100,
     "Olivia WideResNet (Sigma2 PyTorch-on-Olivia guide, PyTorchSingleGpu.md model.py)"),
    ("cnn", "small", MNIST, "CSC MNIST ConvNet (CSCfi/pytorch-ddp-examples mnist_ddp.py)"),
    ("resnet", "small", CIFAR100,
     "NCAR ResNet-18 (negin513/distributed-pytorch-hpc resnet_fsdp_training.py)"),
    ("vit", "lumi", CIFAR100, "LUMI ViT-B/16 (torchvision vit_b_16 as LUMI-AI-Guide "
                              "05-multi-gpu-and-node/ds_visiontransformer.py trains it)"),
])
def test_descriptions_name_the_source(name, size, spec, source):
    assert models.describe_model(name, size) == source
    count = models.count_parameters(build(name, size, spec))
    assert models.describe_model(name, size, count) == f"{source}, {count:,} parameters"


def test_olivia_description_with_its_count():
    assert models.describe_model("wideresnet", "olivia", OLIVIA_PARAMETERS) == (
        "Olivia WideResNet (Sigma2 PyTorch-on-Olivia guide, PyTorchSingleGpu.md model.py), "
        "17,175,444 parameters")


@pytest.mark.parametrize(("name", "size", "label"), [
    ("wideresnet", "small", "WRN-16-4"), ("wideresnet", "16-10", "WRN-16-10"),
    ("cnn", "tiny", "ConvNet 8/16"), ("resnet", "base", "ResNet-34"),
    ("vit", "small", "ViT small (patch 4, dim 192, depth 6, heads 3)"),
])
def test_presets_that_are_no_seeds_network_are_named_by_shape(name, size, label):
    assert models.describe_model(name, size) == label


@pytest.mark.parametrize(("name", "size", "spec", "units"), [
    ("wideresnet", "olivia", CIFAR100, 6),  # each conv_block
    ("resnet", "small", CIFAR100, 8),       # each basic block
    ("wideresnet", "small", CIFAR100, 6),
    ("vit", "tiny", CIFAR100, 2),           # each encoder layer
])
def test_fsdp_units_are_the_blocks(name, size, spec, units):
    model = build(name, size, spec)
    found = model.fsdp_units
    assert len(found) == units
    assert all(isinstance(unit, torch.nn.Module) for unit in found)
    assert {id(m) for m in found} <= {id(m) for m in model.modules()}


def test_convnet_is_one_fsdp_unit():
    """CSC's 29k-parameter ConvNet: sharding its two stages apart would only add all-gathers."""
    assert build("cnn", "small", MNIST).fsdp_units == []


def test_olivia_preset_defaults_are_train_py_options():
    defaults = models.PRESET_DEFAULTS[("wideresnet", "olivia")]
    assert defaults == {"batch_size": 256, "lr": 0.01, "optimizer": "sgd"}
    parser = script("train.py", "train_for_presets").build_parser()
    actions = {action.dest: action for action in parser._actions}
    for (name, size), settings in models.PRESET_DEFAULTS.items():
        choices.check_model_size(name, size)
        for key, value in settings.items():
            assert key in actions, f"{key} is no train.py option"
            assert actions[key].choices is None or value in actions[key].choices


def test_published_figures_are_olivias_three():
    figures = models.published_figures("wideresnet", "olivia")
    assert figures == [
        "~5,100 img/s FP32 on one GH200, batch 256 (PyTorchSingleGpu.md)",
        "37,244 img/s with mixed precision on 4 GH200 (PyTorchMultiGpu.md)",
        "63,190 img/s on 2x4 GH200 (PyTorchMultiNode.md)",
    ]
    figures.clear()  # a copy: the caller cannot change the record
    assert len(models.published_figures("wideresnet", "olivia")) == 3


@pytest.mark.parametrize(("name", "size"), [
    ("wideresnet", "small"), ("cnn", "small"), ("resnet", "small"), ("vit", "lumi"),
])
def test_no_published_figures_where_the_sources_give_none(name, size):
    assert models.published_figures(name, size) == []
