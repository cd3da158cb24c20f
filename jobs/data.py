"""Training data for the examples: synthetic by default, or CIFAR-100 / MNIST read from local files.

Nothing is ever downloaded: compute nodes often have no internet, and a job that fetches 170 MB on
every rank is a job that fails at 3 a.m.  ``--data DIR`` reads the standard distributions that a
user unpacked beforehand; without it the data are synthetic.

Synthetic data are shaped like the dataset (CIFAR-100: 3x32x32, 100 classes; MNIST: 1x28x28, 10
classes) and LEARNABLE: every class has a smooth random prototype image (a coarse 4x4 pattern
upsampled to full size), and a sample is its class prototype plus Gaussian noise.  So the loss
really falls and accuracy really rises, which is what a smoke test of a training stack must show;
constant or pure-noise inputs would let a broken gradient path pass unnoticed.  The data are a
pure function of the seed and the device type they are generated on (the CPU, or the GPU with
``--data-on-device``: the values differ between the two, the distribution does not), so every
rank holds the same tensors without any communication.  A held-out split (same distribution,
disjoint samples) measures validation.

Readers:

* CIFAR-100, "python version" (``cifar-100-python/train`` and ``test``, pickles with ``b'data'``
  (N x 3072 uint8, channel-major) and ``b'fine_labels'``).  The pickles hold numpy arrays (numpy
  is in every image); they are read by an unpickler that allows numpy's array and dtype
  constructors and refuses every other global (unpickling is code execution).
* MNIST idx files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-...``), plain
  or ``.gz``, in DIR, ``DIR/MNIST/raw`` (torchvision's layout) or ``DIR/mnist``.

Images stay uint8 in memory (CIFAR-100 train: 150 MB rather than 600 MB as float32) and are
normalised per batch with the dataset's published mean and standard deviation.

Batches reach the model in one of two ways (``train_batches`` / ``val_batches``):

* from a DataLoader over host tensors, each batch copied to the device (pinned, asynchronous);
* device-resident (``--data-on-device``): the whole set lives on the device and each batch is an
  ``index_select`` there: no DataLoader, no worker, no host-to-device copy per step.

Both ways take the same order of indices (for training, each rank's shard and its order per
epoch are exactly DistributedSampler's, ``shard_order``), so they train on the same batches in
the same order for the same data.
"""

from __future__ import annotations

import functools
import gzip
import math
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Optional, Protocol, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

DATASET_NAMES = ("cifar100", "mnist")


class DataError(Exception):
    """Data files missing or malformed; the message names the file and what is wrong."""


@dataclass(frozen=True)
class DatasetSpec:
    channels: int
    height: int
    width: int
    classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


SPECS = {
    # Olivia's normalisation constants for CIFAR-100, torchvision's usual ones for MNIST.
    "cifar100": DatasetSpec(3, 32, 32, 100, (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "mnist": DatasetSpec(1, 28, 28, 10, (0.1307,), (0.3081,)),
}


class ImageTensors(Dataset):
    """Images and labels held in memory, fetched a whole batch at a time.

    ``__getitems__`` lets the DataLoader index a batch in one tensor operation instead of
    ``batch_size`` Python calls and a collate; ``collate_batch`` passes the result through.
    uint8 images are normalised here; float images are used as they are.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor,
                 mean: Sequence[float] = (), std: Sequence[float] = ()) -> None:
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
        self.images = images
        self.labels = labels.long()
        shape = (1, -1, 1, 1)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(shape) if mean else None
        self.std = torch.tensor(std, dtype=torch.float32).view(shape) if std else None

    def __len__(self) -> int:
        return self.labels.shape[0]

    @property
    def device(self) -> torch.device:
        return self.images.device

    @property
    def nbytes(self) -> int:
        return self.images.nbytes + self.labels.nbytes

    def to(self, device: torch.device) -> "ImageTensors":
        """The same samples on ``device`` (uint8 stays uint8: normalised per batch there)."""
        moved = ImageTensors(self.images.to(device), self.labels.to(device))
        moved.mean = None if self.mean is None else self.mean.to(device)
        moved.std = None if self.std is None else self.std.to(device)
        return moved

    def _prepare(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype == torch.uint8:
            images = images.float().div_(255.0)
            if self.mean is not None:
                images = images.sub_(self.mean).div_(self.std)
        return images

    def take(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch at ``index`` (a long tensor on the data's device), normalised."""
        return self._prepare(self.images.index_select(0, index)), self.labels.index_select(0, index)

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.take(torch.as_tensor(indices, dtype=torch.long))


def collate_batch(batch: Any) -> Any:
    """The DataLoader's collate for ImageTensors: the batch is already stacked."""
    return batch


def shard_order(size: int, rank: int, world_size: int, seed: int, epoch: int) -> torch.Tensor:
    """This rank's training indices for ``epoch``: DistributedSampler's, as one tensor.

    The same permutation on every rank (seeded by ``seed + epoch`` on the CPU, whatever device
    the data live on), cut to a multiple of the world size, rank r taking every W-th index from
    r: disjoint shards of equal length, a new order every epoch, identical to
    ``DistributedSampler(shuffle=True, drop_last=True)`` (checked by the tests).
    """
    generator = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(size, generator=generator)
    return order[rank:(size // world_size) * world_size:world_size]


# ----------------------------------------------------------------------------------------------
# Batches on the device
# ----------------------------------------------------------------------------------------------


class Batches(Protocol):
    """What the trainer iterates: (inputs, labels) already on the training device."""

    def set_epoch(self, epoch: int) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]: ...


class OrderSampler(Sampler[int]):
    """The DataLoader's sampler: the indices ``order(epoch)`` gives, as DeviceBatches cuts them."""

    def __init__(self, order: Callable[[int], torch.Tensor]) -> None:
        self.order = order
        self.indices = order(0)

    def set_epoch(self, epoch: int) -> None:
        self.indices = self.order(epoch)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices.tolist())

    def __len__(self) -> int:
        return self.indices.shape[0]


class LoaderBatches:
    """A DataLoader over host tensors; each batch is copied to the device without waiting for it
    (pinned memory on a GPU, ``non_blocking``)."""

    def __init__(self, dataset: ImageTensors, order: Callable[[int], torch.Tensor],
                 micro_batch: int, drop_last: bool, device: torch.device,
                 num_workers: int) -> None:
        self.sampler = OrderSampler(order)
        self.device = device
        self.loader = DataLoader(
            dataset, sampler=self.sampler, batch_size=micro_batch, drop_last=drop_last,
            collate_fn=collate_batch, num_workers=num_workers,
            pin_memory=device.type == "cuda", persistent_workers=num_workers > 0)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for inputs, labels in self.loader:
            yield (inputs.to(self.device, non_blocking=True),
                   labels.to(self.device, non_blocking=True))


class DeviceBatches:
    """Batches cut on the device from a device-resident set, in the order ``order(epoch)`` gives.

    One small copy of the epoch's indices per epoch; every step is a slice and an
    ``index_select`` on the device, so nothing waits for the host.
    """

    def __init__(self, dataset: ImageTensors, order: Callable[[int], torch.Tensor],
                 micro_batch: int, drop_last: bool) -> None:
        self.dataset = dataset
        self.order = order
        self.micro_batch = micro_batch
        self.drop_last = drop_last
        self.indices = order(0).to(dataset.device)

    def set_epoch(self, epoch: int) -> None:
        self.indices = self.order(epoch).to(self.dataset.device)

    def __len__(self) -> int:
        whole, rest = divmod(self.indices.shape[0], self.micro_batch)
        return whole + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self) * self.micro_batch, self.micro_batch):
            yield self.dataset.take(self.indices[start:start + self.micro_batch])


def batches(dataset: ImageTensors, order: Callable[[int], torch.Tensor], micro_batch: int,
            drop_last: bool, *, device: torch.device, resident: bool,
            num_workers: int) -> Batches:
    """The batches of ``order(epoch)`` on ``device``: cut there (``resident``), else loaded."""
    if resident:
        return DeviceBatches(dataset, order, micro_batch, drop_last)
    return LoaderBatches(dataset, order, micro_batch, drop_last, device, num_workers)


def train_batches(dataset: ImageTensors, *, rank: int, world_size: int, seed: int,
                  micro_batch: int, device: torch.device, resident: bool,
                  num_workers: int) -> Batches:
    """This rank's shuffled training shard, whole batches only (``set_epoch`` reshuffles)."""
    order = functools.partial(shard_order, len(dataset), rank, world_size, seed)
    return batches(dataset, order, micro_batch, True, device=device, resident=resident,
                   num_workers=num_workers)


def val_batches(dataset: ImageTensors, *, rank: int, world_size: int, micro_batch: int,
                device: torch.device, resident: bool,
                num_workers: int) -> tuple[Batches, torch.Tensor]:
    """This rank's exact validation shard and its weights, on ``device``.

    Rank r takes indices r, r+W, r+2W, ...: disjoint shards, padded with the first indices (as
    DistributedSampler pads) only so every rank runs the same number of batches, which FSDP and
    ZeRO-3 need (each forward all-gathers); the weights mark padding with 0 so it is not counted
    twice in the metrics.
    """
    size = len(dataset)
    positions = torch.arange(-(-size // world_size)) * world_size + rank
    weights = (positions < size).to(device=device, dtype=torch.float64)
    indices = positions % size
    return batches(dataset, lambda _epoch: indices, micro_batch, False, device=device,
                   resident=resident, num_workers=num_workers), weights


def fits_on_device(nbytes: int, device: torch.device, share: float = 0.25) -> bool:
    """Whether ``nbytes`` of data may live on ``device``: under ``share`` of the GPU's free
    memory (the rest is the model's, its activations' and the allocator's); always on the CPU,
    where the data are in memory anyway."""
    if device.type != "cuda":
        return True
    free, _total = torch.cuda.mem_get_info(device)
    return nbytes < share * free


# ----------------------------------------------------------------------------------------------
# Synthetic
# ----------------------------------------------------------------------------------------------


def synthetic_nbytes(spec: DatasetSpec, train_samples: int, val_samples: int) -> int:
    """Bytes of the synthetic set (float32 images, int64 labels), known before it exists."""
    return (train_samples + val_samples) * (spec.channels * spec.height * spec.width * 4 + 8)


def synthetic(spec: DatasetSpec, train_samples: int, val_samples: int, seed: int,
              noise: float = 4.0,
              device: torch.device = torch.device("cpu")) -> tuple[ImageTensors, ImageTensors]:
    """Learnable synthetic data: per-class smooth prototypes plus noise, a pure function of seed.

    Inputs are roughly zero-mean, unit-variance (like normalised real images), so the models'
    usual initialisation and learning rates apply.  ``noise`` is the noise standard deviation
    relative to the prototype's: at 4.0 a single pixel says almost nothing while the whole image
    is separable, so accuracy climbs over a few epochs rather than jumping to 100 % at once.
    ``device``: where to generate them (a GPU generates its own set, never copied from the host).
    """
    if train_samples < 1 or val_samples < 1:
        raise ValueError("synthetic data need at least one training and one validation sample")
    generator = torch.Generator(device=device).manual_seed(seed)
    coarse = torch.randn(spec.classes, spec.channels, 4, 4, generator=generator, device=device)
    prototypes = torch.nn.functional.interpolate(
        coarse, size=(spec.height, spec.width), mode="bilinear", align_corners=False)
    prototypes = prototypes / prototypes.std(dim=(1, 2, 3), keepdim=True)
    total = train_samples + val_samples
    labels = torch.randint(0, spec.classes, (total,), generator=generator, device=device)
    images = torch.randn(total, spec.channels, spec.height, spec.width, generator=generator,
                         device=device)
    images.mul_(noise).add_(prototypes[labels])
    images.div_((1.0 + noise**2) ** 0.5)
    train = ImageTensors(images[:train_samples].clone(), labels[:train_samples].clone())
    val = ImageTensors(images[train_samples:].clone(), labels[train_samples:].clone())
    return train, val


# ----------------------------------------------------------------------------------------------
# CIFAR-100 (python pickles of numpy arrays)
# ----------------------------------------------------------------------------------------------


class _ArrayUnpickler(pickle.Unpickler):
    """Loads plain data and numpy arrays; refuses every other global."""

    # Where numpy pickles its arrays from: numpy.core before 2.0, numpy._core since (and
    # _frombuffer for protocol 5).  The names stay allowed whichever numpy wrote the file.
    ALLOWED: ClassVar[frozenset[tuple[str, str]]] = frozenset({
        ("_codecs", "encode"),  # Python 3 writes bytes in protocol 2 as encode(text, "latin1")
        ("numpy", "ndarray"), ("numpy", "dtype"),
        *((f"numpy.{core}.multiarray", "_reconstruct") for core in ("core", "_core")),
        *((f"numpy.{core}.numeric", "_frombuffer") for core in ("core", "_core")),
    })

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise DataError(f"refusing to load {module}.{name} from a data pickle")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module.split(".", 2)[2]  # numpy 2 warns on numpy.core
        return super().find_class(module, name)


def _array(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biu":
        raise DataError(f"{what}: expected whole numbers, found {array.dtype}")
    return array


def read_cifar100_split(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """One CIFAR-100 pickle: (uint8 N x 3 x 32 x 32 images, int64 fine labels)."""
    try:
        with open(path, "rb") as handle:
            batch = _ArrayUnpickler(handle, encoding="bytes").load()
    except DataError as err:
        raise DataError(f"{path}: {err}") from err
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise DataError(f"{path}: not a CIFAR-100 python pickle ({err})") from err
    if not isinstance(batch, dict):
        raise DataError(f"{path}: expected a dict of arrays, found {type(batch).__name__}")
    missing = [key.decode() for key in (b"data", b"fine_labels") if key not in batch]
    if missing:
        raise DataError(f"{path}: no {' or '.join(repr(k) for k in missing)} entry "
                        f"(keys: {', '.join(repr(k) for k in batch)})")
    images = _array(batch[b"data"], f"{path}: 'data'")
    labels = _array(batch[b"fine_labels"], f"{path}: 'fine_labels'")
    if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != 3 * 32 * 32:
        raise DataError(f"{path}: 'data' must be N x 3072 uint8, found "
                        f"{images.shape} {images.dtype}")
    if labels.shape != (images.shape[0],):
        raise DataError(f"{path}: {images.shape[0]} images but {labels.size} labels")
    if labels.size and (labels.min() < 0 or labels.max() >= 100):
        raise DataError(f"{path}: fine labels outside 0..99")
    # Copies: the unpickled arrays may be read-only views of the file's bytes.
    return (torch.from_numpy(images.reshape(-1, 3, 32, 32).copy()),
            torch.from_numpy(labels.astype(np.int64)))


def find_cifar100(root: Path) -> Path:
    """The folder holding ``train`` and ``test``: ROOT/cifar-100-python or ROOT itself."""
    for folder in (root / "cifar-100-python", root):
        if (folder / "train").is_file() and (folder / "test").is_file():
            return folder
    raise DataError(
        f"--data {root}: no CIFAR-100 files: expected {root / 'cifar-100-python'}/train and /test "
        "(the 'python version' archive cifar-100-python.tar.gz, extracted); nothing is downloaded")


# ----------------------------------------------------------------------------------------------
# MNIST (idx files)
# ----------------------------------------------------------------------------------------------

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: Path) -> torch.Tensor:
    """An idx file (LeCun's format: 0, 0, type, ndim, big-endian dims, data) of unsigned bytes."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as err:
        raise DataError(f"{path}: cannot read ({err})") from err
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataError(f"{path}: not an idx file (bad magic number)")
    if data[2] != 0x08:
        raise DataError(f"{path}: idx element type 0x{data[2]:02x}, expected 0x08 (unsigned byte)")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated idx header")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    count = math.prod(dims)
    if len(data) - header != count:
        raise DataError(f"{path}: idx header says {count} bytes of data, file has "
                        f"{len(data) - header}")
    return torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8).reshape(dims)


def _find_idx(folder: Path, stem: str) -> Optional[Path]:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def find_mnist(root: Path) -> dict[str, tuple[Path, Path]]:
    """The four idx files, in ROOT, ROOT/MNIST/raw (torchvision's layout) or ROOT/mnist."""
    for folder in (root, root / "MNIST" / "raw", root / "mnist"):
        found = {split: (_find_idx(folder, images), _find_idx(folder, labels))
                 for split, (images, labels) in MNIST_FILES.items()}
        if all(path is not None for pair in found.values() for path in pair):
            return found  # type: ignore[return-value]
    names = ", ".join(name for pair in MNIST_FILES.values() for name in pair)
    raise DataError(f"--data {root}: no MNIST files: expected {names} (optionally .gz) in it, "
                    "in MNIST/raw or in mnist; nothing is downloaded")


def read_mnist_split(images_path: Path, labels_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.dim() != 3:
        raise DataError(f"{images_path}: expected N x rows x cols images, found {images.dim()} "
                        "dimensions")
    if labels.dim() != 1 or labels.shape[0] != images.shape[0]:
        raise DataError(f"{labels_path}: {labels.numel()} labels for {images.shape[0]} images")
    if labels.numel() and labels.max() >= 10:
        raise DataError(f"{labels_path}: labels outside 0..9")
    return images.unsqueeze(1), labels.long()


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------


def load_dataset(name: str, data_dir: Optional[str], train_samples: int, val_samples: int,
                 seed: int, device: torch.device = torch.device("cpu")
                 ) -> tuple[ImageTensors, ImageTensors, str]:
    """(train, validation, source description) for ``--dataset`` / ``--data`` / ``--samples``.

    Synthetic data are generated on ``device``; real data are always read into host memory
    (the caller stages them on a device when they fit).
    """
    spec = SPECS[name]
    if data_dir is None:
        train, val = synthetic(spec, train_samples, val_samples, seed, device=device)
        return train, val, f"synthetic ({train_samples} train, {val_samples} validation)"
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"--data {root}: no such folder")
    if name == "cifar100":
        folder = find_cifar100(root)
        train_x, train_y = read_cifar100_split(folder / "train")
        val_x, val_y = read_cifar100_split(folder / "test")
        source = str(folder)
    else:
        files = find_mnist(root)
        train_x, train_y = read_mnist_split(*files["train"])
        val_x, val_y = read_mnist_split(*files["test"])
        source = str(files["train"][0].parent)
        if tuple(train_x.shape[2:]) != (spec.height, spec.width):
            raise DataError(f"{files['train'][0]}: images are {tuple(train_x.shape[2:])}, "
                            f"expected {spec.height}x{spec.width}")
    return (ImageTensors(train_x, train_y, spec.mean, spec.std),
            ImageTensors(val_x, val_y, spec.mean, spec.std), source)

