"""Tests for maskfed.engine.data: image-folder archives, the cache, source resolution, statistics."""

from __future__ import annotations

import errno
import os
import random
import struct
import tarfile
import time
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from maskfed import paths

# Solid colours per (class, image) so that order and labels can be read back from the pixels.

from maskfed.engine import data
# Each class has a base colour; images within a class differ in the blue channel.
BASE = {"a": (200, 30, 30), "b": (30, 200, 30), "c": (40, 40, 40)}
NAMES = {"train": ["0000.jpg", "0001.jpg"], "test": ["0000.jpg"]}
JPEG_TOL = 8  # quality-95 JPEG of a flat colour lands within a few levels


def colour(cls: str, name: str) -> tuple[int, int, int]:
    r, g, b = BASE[cls]
    return (r, g, b + 100 * int(name[:4]))


def write_image_folder(root: Path, classes=("a", "b", "c"), names=NAMES, size=32) -> list[Path]:
    """Write <root>/<split>/<class>/<name> JPEGs; return the files in a scrambled order."""
    files = []
    for split, split_names in names.items():
        for cls in classes:
            d = root / split / cls
            d.mkdir(parents=True, exist_ok=True)
            for name in split_names:
                rgb = colour(cls, name) if cls in BASE else (128, 128, 128)
                Image.new("RGB", (size, size), rgb).save(d / name, quality=95)
                files.append(d / name)
    return files[::-1]  # reverse order: the loader must sort, not trust the listing


def write_archive(tmp_path: Path, prefix: str = "", name="imgs.tar.gz") -> Path:
    folder = tmp_path / "src_folder"
    files = write_image_folder(folder)
    archive = tmp_path / name
    with tarfile.open(archive, "w:gz" if name.endswith("gz") else "w") as tf:
        for f in files:
            tf.add(f, arcname=prefix + str(f.relative_to(folder)))
    return archive


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("MASKFED_CACHE_DIR", str(cache))
    return cache


def expected_pixels(split: str) -> tuple[list[tuple[int, int, int]], list[int]]:
    cols, labels = [], []
    for i, cls in enumerate(sorted(BASE)):
        for name in sorted(NAMES[split]):
            cols.append(colour(cls, name))
            labels.append(i)
    return cols, labels


def assert_matches_folder(d: data.ImageData) -> None:
    assert d.classes == ("a", "b", "c")
    assert d.x_train.shape == (6, 3, 32, 32) and d.x_train.dtype == torch.uint8
    assert d.x_test.shape == (3, 3, 32, 32) and d.x_test.dtype == torch.uint8
    assert d.y_train.dtype == torch.int64 and d.y_test.dtype == torch.int64
    for split in ("train", "test"):
        cols, labels = expected_pixels(split)
        x = getattr(d, f"x_{split}")
        assert getattr(d, f"y_{split}").tolist() == labels
        # mean colour of each image, channels first: [N, 3]
        got = x.to(torch.float32).mean(dim=(2, 3))
        want = torch.tensor(cols, dtype=torch.float32)
        assert torch.allclose(got, want, atol=JPEG_TOL), (got, want)


@pytest.mark.parametrize("prefix", ["", "cifar-mini/"])
def test_archive_decodes_labels_order_and_pixels(tmp_path, tmp_cache, prefix):
    archive = write_archive(tmp_path, prefix=prefix)

    d = data.load_cifar10(archive, allow_download=False, cache=False)

    assert_matches_folder(d)
    assert d.source_kind == "archive"
    assert str(archive) in d.source
    assert not tmp_cache.exists()  # cache=False writes nothing


def test_plain_tar_and_directory_give_same_tensors(tmp_path, tmp_cache):
    archive = write_archive(tmp_path, name="imgs.tar")

    from_tar = data.load_cifar10(archive, cache=False)
    from_dir = data.load_cifar10(tmp_path / "src_folder", cache=False)

    assert_matches_folder(from_dir)
    assert from_dir.source_kind == "image_folder"
    assert torch.equal(from_tar.x_train, from_dir.x_train)
    assert torch.equal(from_tar.y_test, from_dir.y_test)


def test_cache_is_written_once_and_reused(tmp_path, tmp_cache, monkeypatch):
    archive = write_archive(tmp_path)
    first = data.load_cifar10(archive)
    cached_files = list((tmp_cache / "data").glob("*.pt"))
    assert len(cached_files) == 1
    assert not list((tmp_cache / "data").glob("*.tmp"))  # atomic write left no temp file

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again instead of using the cache")

    real_decode = data._decode_all
    monkeypatch.setattr(data, "_decode_all", no_decoding)
    second = data.load_cifar10(archive)

    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(first, name), getattr(second, name))
    assert second.source == first.source and second.classes == first.classes

    # a changed archive (new mtime) gets a new cache entry instead of stale tensors
    monkeypatch.setattr(data, "_decode_all", real_decode)
    st = archive.stat()
    os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    data.load_cifar10(archive)
    assert len(list((tmp_cache / "data").glob("*.pt"))) == 2


def test_missing_data_path_raises_file_not_found(tmp_path, tmp_cache):
    missing = tmp_path / "nowhere.tar.gz"

    with pytest.raises(FileNotFoundError) as err:
        data.load_cifar10(missing)

    assert "data_path" in str(err.value) and str(missing) in str(err.value)


def test_non_archive_file_and_mixed_sizes_are_rejected(tmp_path, tmp_cache):
    stray = tmp_path / "notes.txt"
    stray.write_text("hello")
    with pytest.raises(ValueError, match="archive"):
        data.load_cifar10(stray)

    folder = tmp_path / "mixed"
    write_image_folder(folder)
    Image.new("RGB", (16, 16), (0, 0, 0)).save(folder / "train" / "a" / "0002.jpg")
    with pytest.raises(ValueError, match="16x16"):
        data.load_cifar10(folder, cache=False)


def test_cifar10_class_names_trigger_the_full_check(tmp_path, tmp_cache):
    folder = tmp_path / "tiny_cifar"
    write_image_folder(folder, classes=data.CIFAR10_CLASSES, names={"train": ["0000.jpg"], "test": ["0000.jpg"]})

    with pytest.raises(ValueError, match="full CIFAR-10"):
        data.load_cifar10(folder, cache=False)


def _missing_everything(tmp_path, monkeypatch) -> Path:
    missing = tmp_path / "absent" / "cifar10-jpeg.tar.gz"
    monkeypatch.setenv("MASKFED_SHARED_ARCHIVE", str(missing))
    return missing


def test_unavailable_without_download_names_all_sources(tmp_path, tmp_cache, monkeypatch):
    missing = _missing_everything(tmp_path, monkeypatch)

    with pytest.raises(data.DataUnavailableError) as err:
        data.load_cifar10(allow_download=False)

    msg = str(err.value)
    assert str(missing) in msg
    assert "data_path=" in msg and "--data-path" in msg and "DATA=" in msg
    assert "torchvision" in msg and "allow_download=False" in msg


def test_unavailable_reports_the_download_error(tmp_path, tmp_cache, monkeypatch):
    missing = _missing_everything(tmp_path, monkeypatch)
    import torchvision.datasets

    class OfflineCIFAR10:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("simulated: no network on this machine")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", OfflineCIFAR10)

    with pytest.raises(data.DataUnavailableError) as err:
        data.load_cifar10(allow_download=True)

    msg = str(err.value)
    assert str(missing) in msg and "data_path=" in msg
    assert "simulated: no network" in msg and "torchvision" in msg  # the download's own error, and who raised it


def test_channel_stats_and_normalize_hand_case():
    # 2 images of 1x2 pixels. ch0: 0,255,0,255 -> mean .5, std .5; ch1: all 51 -> .2, 0;
    # ch2: 0,0,0,255 -> mean .25, std sqrt(.25*.75)
    x = torch.tensor(
        [[[[0, 255]], [[51, 51]], [[0, 0]]], [[[0, 255]], [[51, 51]], [[0, 255]]]], dtype=torch.uint8
    )

    mean, std = data.channel_stats(x)

    assert mean.dtype == torch.float32 and mean.shape == (3,)
    assert torch.allclose(mean, torch.tensor([0.5, 0.2, 0.25]), atol=1e-6)
    assert torch.allclose(std, torch.tensor([0.5, 0.0, 0.75**0.5 / 2]), atol=1e-6)

    z = data.normalize(x, torch.tensor([0.5, 0.2, 0.25]), torch.tensor([0.5, 0.1, 0.25]))
    assert z.dtype == torch.float32 and z.shape == x.shape
    assert z[0, 0, 0].tolist() == pytest.approx([-1.0, 1.0])
    assert z[1, 1, 0].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    assert z[1, 2, 0].tolist() == pytest.approx([-1.0, 3.0])
    with pytest.raises(ValueError, match="std"):
        data.normalize(x, mean, std)  # channel 1 has std 0
    with pytest.raises(TypeError):
        data.channel_stats(x.float())


def test_synthetic_is_deterministic_balanced_and_learnable():
    a = data.synthetic_image_data(n_train=200, n_test=100, num_classes=4, seed=3, image_size=8)
    b = data.synthetic_image_data(n_train=200, n_test=100, num_classes=4, seed=3, image_size=8)
    c = data.synthetic_image_data(n_train=200, n_test=100, num_classes=4, seed=4, image_size=8)

    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, c.x_train)
    assert a.x_train.shape == (200, 3, 8, 8) and a.x_train.dtype == torch.uint8
    assert torch.bincount(a.y_train).tolist() == [50, 50, 50, 50]
    assert torch.bincount(a.y_test).tolist() == [25, 25, 25, 25]
    assert a.source_kind == "synthetic" and "not CIFAR-10" in a.source
    # learnable: nearest class-mean classifier fit on train is near perfect on test
    xtr, xte = a.x_train.flatten(1).float(), a.x_test.flatten(1).float()
    centroids = torch.stack([xtr[a.y_train == k].mean(0) for k in range(4)])
    pred = torch.cdist(xte, centroids).argmin(1)
    assert (pred == a.y_test).float().mean() > 0.95


def _fake_cifar(n_train=50_000, n_test=10_000, classes=data.CIFAR10_CLASSES, y_train=None):
    img = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)  # expanded views: no 150 MB allocation
    return data.ImageData(
        x_train=img.expand(n_train, -1, -1, -1),
        y_train=torch.arange(n_train) % 10 if y_train is None else y_train,
        x_test=img.expand(n_test, -1, -1, -1),
        y_test=torch.arange(n_test) % 10,
        classes=classes,
        source="test fixture",
        source_kind="synthetic",
    )


def test_check_cifar10_accepts_full_and_rejects_wrong_sets():
    data.check_cifar10(_fake_cifar())

    with pytest.raises(ValueError, match="49999"):
        data.check_cifar10(_fake_cifar(n_train=49_999))
    with pytest.raises(ValueError, match="classes"):
        data.check_cifar10(_fake_cifar(classes=tuple(f"c{i}" for i in range(10))))
    skewed = torch.arange(50_000) % 10
    skewed[:10] = 0  # 50,000 images but 5,009 / 4,999 ... per class
    with pytest.raises(ValueError, match="per-class counts"):
        data.check_cifar10(_fake_cifar(y_train=skewed))
    bad = torch.arange(50_000) % 10
    bad[0] = 10
    with pytest.raises(ValueError, match="outside 0..9"):
        data.check_cifar10(_fake_cifar(y_train=bad))


def test_real_cifar10_archive():
    """The shared offline archive: full CIFAR-10, JPEG-provenance noted.

    Uses the repository's default cache so that the one slow decode (~15-25 s) is reused by
    real runs; later loads take well under a second.
    """
    archive = paths.shared_archive()
    if not archive.is_file():
        pytest.skip(f"shared CIFAR-10 archive not present at {archive}")

    t0 = time.perf_counter()
    d = data.load_cifar10(allow_download=False)
    elapsed = time.perf_counter() - t0

    data.check_cifar10(d)
    assert d.source_kind == "archive" and "JPEG" in d.source
    assert d.classes == data.CIFAR10_CLASSES
    print(f"real CIFAR-10 archive loaded in {elapsed:.2f} s")


@pytest.mark.parametrize("name", ["imgs.tar.gz", "imgs.tar"])
def test_truncated_archive_names_the_file_and_what_is_expected(tmp_path, tmp_cache, name):
    whole = write_archive(tmp_path, name=name).read_bytes()
    cut = tmp_path / f"cut-{name}"
    cut.write_bytes(whole[: len(whole) // 2])  # as a download stopped half way

    with pytest.raises(data.DataReadError) as exc:
        data.load_cifar10(cut)

    msg = str(exc.value)
    assert str(cut) in msg and "truncated" in msg and "train/<class>/" in msg
    assert isinstance(exc.value, ValueError)


def test_undecodable_image_and_unreadable_torchvision_folder_are_named(tmp_path, tmp_cache):
    folder = tmp_path / "broken"
    write_image_folder(folder)
    (folder / "train" / "a" / "0001.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(data.DataReadError, match=r"train/a/0001.jpg .*decoded"):
        data.load_cifar10(folder, cache=False)

    tv = tmp_path / "cifar-10-batches-py"
    tv.mkdir()
    with pytest.raises(data.DataReadError) as exc:
        data.load_cifar10(tv)
    assert str(tv) in str(exc.value) and "data_batch_1" in str(exc.value)


def test_an_unwritable_cache_folder_costs_a_warning_not_the_load(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MASKFED_CACHE_DIR", str(blocker / "cache"))
    folder = tmp_path / "imgs"
    write_image_folder(folder)

    with pytest.warns(UserWarning, match="MASKFED_CACHE_DIR"):
        d = data.load_cifar10(folder)
    assert_matches_folder(d)


@pytest.mark.parametrize("failure", [
    OSError(28, "No space left on device"),
    RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0"),  # torch's writer on a full disk
])
def test_a_full_cache_disk_costs_a_warning_not_the_load(tmp_path, tmp_cache, monkeypatch, failure):
    folder = tmp_path / "imgs"
    write_image_folder(folder)

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"half")
        raise failure

    monkeypatch.setattr(data.torch, "save", full_disk)
    with pytest.warns(UserWarning, match=r"(?i)cache .*written.*(space|enforce).*MASKFED_CACHE_DIR"):
        d = data.load_cifar10(folder)
    assert_matches_folder(d)
    assert list((tmp_cache / "data").iterdir()) == []  # its temporary file removed, no half cache file


class _Statvfs:
    f_frsize = 4096
    f_bavail = 2  # 8 KiB free: less than the 27,720 bytes of tensors


@pytest.mark.parametrize("failure", [
    RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
                 "file write failed"),  # what torch's writer says on a full disk: no errno, no words for it
    OSError(errno.ENOSPC, "No space left on device"),
])
def test_a_full_disk_is_named_in_plain_words_not_torchs_enforce_fail(tmp_path, tmp_cache, monkeypatch, failure):
    folder = tmp_path / "imgs"
    write_image_folder(folder)

    def full_disk(obj, f, *args, **kwargs):
        raise failure

    monkeypatch.setattr(data.torch, "save", full_disk)
    monkeypatch.setattr(data.os, "statvfs", lambda path: _Statvfs())
    with pytest.warns(UserWarning) as caught:
        d = data.load_cifar10(folder)
    msg = " ".join(str(w.message) for w in caught)
    needed = sum(t.numel() * t.element_size() for t in (d.x_train, d.y_train, d.x_test, d.y_test))
    assert needed == 27_720
    assert "no space left" in msg and f" {tmp_cache / 'data'} (" in msg  # the cause and the folder
    assert "(0.01 MB free," in msg and " 0.03 MB needed)" in msg          # room there and room needed
    assert msg.startswith("the decoded-data cache") and "MASKFED_CACHE_DIR" in msg
    assert_matches_folder(d)
    assert list((tmp_cache / "data").iterdir()) == []


def test_enospc_deep_in_the_chain_is_found_and_room_left_keeps_the_writers_words(tmp_path):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . file write failed") from inner
    except RuntimeError as exc:
        chained = exc
    cause = data.write_failure_cause(chained, tmp_path, 10**6)
    assert cause.startswith("no space left") and f" {tmp_path} (" in cause
    # a failure with room to spare is not called a full disk
    other = RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0")
    assert data.write_failure_cause(other, tmp_path, 1) == str(other)  # passed on as torch said it


# --- the decoded-data cache is checked on every load; `maskfed cache --list/--prune` ---


def _overwrite_largest_record(cache_file: Path, seed: int = 0) -> None:
    """Random bytes over the largest tensor payload in the torch zip file, in place (same size)."""
    with zipfile.ZipFile(cache_file) as zf:
        info = max(zf.infolist(), key=lambda i: i.file_size)
    raw = bytearray(cache_file.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    raw[start:start + info.file_size] = random.Random(seed).randbytes(info.file_size)
    size = cache_file.stat().st_size
    cache_file.write_bytes(bytes(raw))
    assert cache_file.stat().st_size == size


def test_a_cache_corrupted_in_place_is_detected_before_use_and_rebuilt(tmp_path, tmp_cache, monkeypatch):
    archive = write_archive(tmp_path)
    fresh = data.load_cifar10(archive, cache=False)
    data.load_cifar10(archive)
    (cache_file,) = (tmp_cache / "data").glob("*.pt")
    _overwrite_largest_record(cache_file)
    # the fault: torch loads the damaged file without complaint, with other pixels
    raw = torch.load(cache_file, weights_only=True)
    assert not torch.equal(raw["x_train"], fresh.x_train)

    with pytest.warns(UserWarning, match=r"decoded-data .*corrupted.*hash") as caught:
        got = data.load_cifar10(archive)
    assert str(cache_file) in str(caught[0].message) and "rebuilding" in str(caught[0].message)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(got, name), getattr(fresh, name)), name
    assert data.content_sha256(got) == data.content_sha256(fresh)

    # the rebuilt file is whole again: read without decoding, without a warning
    monkeypatch.setattr(data, "_decode_all", lambda *a, **k: pytest.fail("decoded again instead of the cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = data.load_cifar10(archive)
    assert torch.equal(again.x_train, fresh.x_train)


def test_a_cache_file_records_its_hash_source_and_time(tmp_path, tmp_cache):
    archive = write_archive(tmp_path)
    d = data.load_cifar10(archive)
    (cache_file,) = (tmp_cache / "data").glob("*.pt")
    record = torch.load(cache_file, weights_only=True)
    assert record["format"] == 2 and record["source_path"] == str(archive.resolve())
    assert record["source_kind"] == "archive" and record["decoded_utc"].endswith("+00:00")
    # the stored hash is the data fingerprint's: the fingerprint is not computed a second time
    assert record["sha256"].split(":")[0] == data.content_sha256(d) == d.__dict__["_content_sha256"]
    assert data.content_sha256(d) == data.content_sha256(data.load_cifar10(archive, cache=False))


def test_cache_list_and_prune_tell_live_from_stale_entries(tmp_path, tmp_cache, capsys):
    from maskfed import cli

    live_src = write_archive(tmp_path / "live")
    gone_src = write_archive(tmp_path / "gone")
    data.load_cifar10(live_src)
    data.load_cifar10(gone_src)
    live_file = data.cache_file(live_src.resolve(), "archive")
    gone_file = data.cache_file(gone_src.resolve(), "archive")
    gone_mb = gone_file.stat().st_size / 1e6
    gone_src.unlink()  # its source deleted: the entry can never be used again
    junk = tmp_cache / "data" / "0123456789abcdef.pt"
    junk.write_bytes(random.Random(1).randbytes(3_000_000))  # 3 MB, not a torch file
    old = tmp_cache / "data" / "fedcba9876543210.pt"
    torch.save({"format": 1, "x_train": torch.zeros(10, dtype=torch.uint8)}, old)  # before sources were recorded
    old_mb = old.stat().st_size / 1e6

    assert cli.main(["cache", "--list"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[:-1]}
    assert set(lines) == {live_file.name, gone_file.name, junk.name, old.name}
    assert " live  source: " + str(live_src.resolve()) in lines[live_file.name]
    assert " source missing  source: " + str(gone_src.resolve()) in lines[gone_file.name]
    assert "     3.0 MB  unreadable" in lines[junk.name] and "(not recorded)" in lines[junk.name]
    assert f"{gone_mb:8.1f} MB" in lines[gone_file.name] and "modified: 20" in lines[gone_file.name]
    assert " old format " in lines[old.name] and "source: (not recorded)" in lines[old.name]
    assert "4 file(s)" in out.splitlines()[-1] and "1 live, 3 stale" in out.splitlines()[-1]

    assert cli.main(["cache", "--prune"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in (tmp_cache / "data").iterdir()) == [live_file.name]
    assert f"removed {gone_file.name}" in out and f"removed {junk.name}" in out and f"removed {old.name}" in out
    assert live_file.name not in out
    last = out.splitlines()[-1]  # how many files, from where, how many MB
    assert last.startswith("removed 3 file(s) ") and f" {tmp_cache / 'data'}, " in last \
        and last.endswith(f" {gone_mb + 3 + old_mb:.1f} MB freed")

    # a changed source (new mtime) no longer maps to its entry's key: stale too
    st = live_src.stat()
    os.utime(live_src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert cli.main(["cache", "--list"]) == 0
    assert " source changed  source: " in capsys.readouterr().out

    assert cli.main(["cache", "--prune", "--all"]) == 0
    assert "removed 1 file(s)" in capsys.readouterr().out
    assert list((tmp_cache / "data").iterdir()) == []
    assert cli.main(["cache", "--all"]) == 2  # --all without --prune is refused
    err = capsys.readouterr().err
    assert "--all" in err and "--prune" in err
    assert cli.main(["cache"]) == 2
    err = capsys.readouterr().err
    assert "--list" in err and "--prune" in err


# --- data that is not what it says: dataset "cifar10" refuses other classes, "image_folder" runs them ---


def test_cifar10_dataset_refuses_an_eleventh_class_folder(tmp_path, tmp_cache):
    folder = tmp_path / "cifar_plus_one"
    write_image_folder(folder, classes=(*data.CIFAR10_CLASSES, "zebra"),
                       names={"train": ["0000.jpg"], "test": ["0000.jpg"]})

    with pytest.raises(ValueError) as exc:
        data.load_dataset("cifar10", folder, cache=False)

    msg = str(exc.value)
    assert f"data_path={str(folder)!r}" in msg
    assert "11 class folders" in msg and "'zebra'" in msg and "extra: ['zebra']" in msg
    assert "not CIFAR-10's ten" in msg and msg.count("zebra") == 1  # extra and missing, not the whole list again
    assert "dataset='image_folder'" in msg  # says how to run it anyway


def test_cifar10_dataset_refuses_other_classes_in_an_archive(tmp_path, tmp_cache):
    archive = write_archive(tmp_path)  # classes a, b, c

    with pytest.raises(ValueError, match=r"CIFAR-10.* 3 class .*ten.*\['a', 'b', 'c'\]"):
        data.load_dataset("cifar10", archive, cache=False)


def test_image_folder_dataset_keeps_its_own_classes_and_says_it_is_not_cifar10(tmp_path, tmp_cache):
    archive = write_archive(tmp_path)

    d = data.load_dataset("image_folder", archive, cache=False)

    assert_matches_folder(d)  # 3 classes, labels 0..2
    assert "not CIFAR-10: 3 classes: a, b, c" in d.source


def test_image_folder_dataset_needs_a_data_path_and_unknown_datasets_are_refused(tmp_cache):
    with pytest.raises(ValueError, match="image_folder.*needs data_path"):
        data.load_dataset("image_folder", None)
    with pytest.raises(ValueError, match=r"^dataset .*\['cifar10', 'image_folder'\]"):
        data.load_dataset("cifar100", None)


@pytest.mark.parametrize("as_archive", [False, True])
def test_a_test_class_the_train_split_lacks_is_refused(tmp_path, tmp_cache, as_archive):
    folder = tmp_path / "extra_test_class"
    write_image_folder(folder)
    write_image_folder(folder, classes=("d",), names={"test": ["0000.jpg"]})  # test/d only
    src = folder
    if as_archive:
        src = tmp_path / "extra.tar"
        with tarfile.open(src, "w") as tf:
            tf.add(folder, arcname="extra")

    for dataset in ("cifar10", "image_folder"):
        with pytest.raises(ValueError, match=r"test/ .*train.*lacks: \['d'\]"):
            data.load_dataset(dataset, src, cache=False)
