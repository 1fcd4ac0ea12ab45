"""Tests for fusegrad/nn/datasets.py: the IDX parser on files written here, checksummed downloads from file:// URLs,
mnist() on small fake files, the offline digits stand-in and the standard-library text corpus."""

from __future__ import annotations

import gzip
import hashlib
import pathlib

import numpy as np
import pytest
import torch

from fusegrad import dtypes
from fusegrad.nn import datasets
from fusegrad.nn.datasets import (
    UNKNOWN_ID,
    VOCAB,
    VOCAB_SIZE,
    decode,
    digits,
    downloads_dir,
    encode,
    fetch,
    mnist,
    parse_idx,
    resize_bilinear,
    stdlib_corpus,
)

IDX_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}


def write_idx(array: np.ndarray) -> bytes:
    """An IDX file (big-endian) holding `array`, written independently of the parser under test."""
    code = IDX_CODES[array.dtype.type]
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


# *** IDX parser ***


@pytest.mark.parametrize("dtype", list(IDX_CODES))
@pytest.mark.parametrize("zipped", [False, True])
def test_parse_idx_round_trip(dtype: type, zipped: bool) -> None:
    array = (np.arange(2 * 3 * 5) - 7).reshape(2, 3, 5).astype(dtype)
    if dtype is np.uint8:
        array = (np.arange(30) * 9 % 256).reshape(2, 3, 5).astype(np.uint8)
    data = write_idx(array)
    parsed = parse_idx(gzip.compress(data) if zipped else data)
    assert parsed.shape == (2, 3, 5)
    assert parsed.dtype == np.dtype(dtype)  # native byte order, whatever the file's
    np.testing.assert_array_equal(parsed, array)


def test_parse_idx_one_dim_and_empty() -> None:
    np.testing.assert_array_equal(parse_idx(write_idx(np.array([3, 1, 4], np.uint8))), [3, 1, 4])
    assert parse_idx(write_idx(np.zeros((0, 28, 28), np.uint8))).shape == (0, 28, 28)


def test_parse_idx_errors() -> None:
    good = write_idx(np.arange(12, dtype=np.uint8).reshape(3, 4))
    with pytest.raises(ValueError, match=r"parse_idx: labels is truncated: got 3 bytes, expected a 4-byte magic"):
        parse_idx(good[:3], "labels")
    with pytest.raises(ValueError, match=r"bad magic number: got 01000802"):
        parse_idx(b"\x01" + good[1:])
    with pytest.raises(ValueError, match=r"unknown type code: got 0x07, expected one of 0x08, "):
        parse_idx(good[:2] + b"\x07" + good[3:])
    with pytest.raises(ValueError, match=r"truncated in its header: got 8 bytes, expected 12"):
        parse_idx(good[:8])
    with pytest.raises(ValueError, match=r"is truncated: got 23 bytes, expected 24 for shape \(3, 4\)"):
        parse_idx(good[:-1])
    with pytest.raises(ValueError, match=r"longer than its header says: got 25 bytes, expected 24"):
        parse_idx(good + b"\x00")


def test_parse_idx_corrupt_gzip() -> None:
    zipped = gzip.compress(write_idx(np.arange(1000, dtype=np.int32)))
    with pytest.raises(ValueError, match=r"parse_idx: images is not a valid gzip stream .*: got \d+ bytes"):
        parse_idx(zipped[: len(zipped) // 2], "images")  # cut short
    flipped = bytearray(zipped)
    flipped[len(zipped) // 2] ^= 0xFF
    with pytest.raises(ValueError, match=r"not a valid gzip stream"):
        parse_idx(bytes(flipped))  # a flipped byte fails the CRC or the deflate stream


# *** downloads ***


def test_downloads_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.delenv("DOWNLOADS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert downloads_dir() == tmp_path / "cache" / "fusegrad" / "downloads"
    monkeypatch.setenv("DOWNLOADS_DIR", str(tmp_path / "mine"))
    assert downloads_dir() == tmp_path / "mine"


def test_fetch_file_url_checks_and_caches(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "served" / "data.bin"
    source.parent.mkdir()
    source.write_bytes(b"hello idx")
    digest = hashlib.sha256(b"hello idx").hexdigest()
    cache = tmp_path / "cache"
    assert fetch(source.as_uri(), digest, cache) == b"hello idx"
    assert (cache / "data.bin").read_bytes() == b"hello idx"
    assert list(cache.iterdir()) == [cache / "data.bin"]  # no leftover temporary file
    source.unlink()  # from now on only the cache can answer
    assert fetch(source.as_uri(), digest, cache) == b"hello idx"


def test_fetch_checksum_mismatch_keeps_nothing(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "data.bin"
    source.write_bytes(b"tampered")
    wanted = hashlib.sha256(b"original").hexdigest()
    got = hashlib.sha256(b"tampered").hexdigest()
    with pytest.raises(ValueError, match=rf"fetch: checksum mismatch for .*data.bin \(8 bytes\): got sha256 {got}, "
                                         rf"expected {wanted}"):  # fmt: skip
        fetch(source.as_uri(), wanted, tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_fetch_refetches_a_damaged_cache_file(tmp_path: pathlib.Path) -> None:
    calls: list[str] = []

    def fetcher(url: str) -> bytes:
        calls.append(url)
        return b"payload"

    digest = hashlib.sha256(b"payload").hexdigest()
    assert fetch("https://example.invalid/x/file.gz", digest, tmp_path, fetcher) == b"payload"
    assert fetch("https://example.invalid/x/file.gz", digest, tmp_path, fetcher) == b"payload"
    assert calls == ["https://example.invalid/x/file.gz"]  # the second call came from the cache
    (tmp_path / "file.gz").write_bytes(b"pay")  # a download cut short in some earlier life
    assert fetch("https://example.invalid/x/file.gz", digest, tmp_path, fetcher) == b"payload"
    assert len(calls) == 2
    assert (tmp_path / "file.gz").read_bytes() == b"payload"


# *** mnist on fake files ***


def fake_mnist_files(n_train: int = 6, n_test: int = 4, labels_max: int = 9) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    arrays = [
        rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        (np.arange(n_train) % (labels_max + 1)).astype(np.uint8),
        rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        (np.arange(n_test)[::-1] % (labels_max + 1)).astype(np.uint8),
    ]
    return {name: gzip.compress(write_idx(a)) for name, a in zip(datasets.MNIST_FILES, arrays, strict=True)}


def serve(files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch, attribute: str = "MNIST_SHA256") -> list[str]:
    """Point the module's checksums at `files` and return the list that records the URLs fetched."""
    digests = tuple(hashlib.sha256(files[name]).hexdigest() for name in datasets.MNIST_FILES)
    monkeypatch.setattr(datasets, attribute, digests)
    return []


def test_mnist_from_fake_files(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    files = fake_mnist_files()
    urls = serve(files, monkeypatch)

    def fetcher(url: str) -> bytes:
        urls.append(url)
        return files[url.rsplit("/", 1)[-1]]

    x_train, y_train, x_test, y_test = mnist(fetcher=fetcher, cache_dir=tmp_path)
    assert (x_train.shape, y_train.shape, x_test.shape, y_test.shape) == ((6, 1, 28, 28), (6,), (4, 1, 28, 28), (4,))
    assert x_train.dtype == y_train.dtype == dtypes.uint8
    expected = [parse_idx(files[name]) for name in datasets.MNIST_FILES]
    np.testing.assert_array_equal(x_train.numpy()[:, 0], expected[0])
    np.testing.assert_array_equal(y_test.numpy(), expected[3])
    assert urls == [datasets.MNIST_URL + name for name in datasets.MNIST_FILES]
    assert sorted(p.name for p in (tmp_path / "mnist").iterdir()) == sorted(datasets.MNIST_FILES)


def test_fashion_mnist_uses_its_own_url_and_checksums(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    files = fake_mnist_files()
    urls = serve(files, monkeypatch, "FASHION_MNIST_SHA256")

    def fetcher(url: str) -> bytes:
        urls.append(url)
        return files[url.rsplit("/", 1)[-1]]

    assert mnist(fashion=True, fetcher=fetcher, cache_dir=tmp_path)[0].shape == (6, 1, 28, 28)
    assert all(url.startswith(datasets.FASHION_MNIST_URL) for url in urls)
    assert sorted(p.name for p in (tmp_path / "fashion-mnist").iterdir()) == sorted(datasets.MNIST_FILES)


def test_mnist_rejects_bad_contents(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    files = fake_mnist_files(n_train=12, labels_max=10)
    serve(files, monkeypatch)
    with pytest.raises(ValueError, match=r"mnist: train labels out of range: got max 10, expected 0..9"):
        mnist(fetcher=lambda url: files[url.rsplit("/", 1)[-1]], cache_dir=tmp_path / "a")
    files = fake_mnist_files()
    files["t10k-labels-idx1-ubyte.gz"] = gzip.compress(write_idx(np.zeros(3, np.uint8)))  # 4 test images
    serve(files, monkeypatch)
    with pytest.raises(ValueError, match=r"mnist: test labels do not match the images: got uint8 \(3,\), expected"):
        mnist(fetcher=lambda url: files[url.rsplit("/", 1)[-1]], cache_dir=tmp_path / "b")


def test_mnist_real_checksums_refuse_fake_files(tmp_path: pathlib.Path) -> None:
    files = fake_mnist_files()
    with pytest.raises(ValueError, match=r"fetch: checksum mismatch for .*train-images-idx3-ubyte.gz"):
        mnist(fetcher=lambda url: files[url.rsplit("/", 1)[-1]], cache_dir=tmp_path)


# *** offline digits ***


def test_resize_bilinear_matches_torch() -> None:
    images = np.random.default_rng(1).random((3, 8, 8), dtype=np.float32)
    ours = resize_bilinear(images, 28)
    theirs = torch.nn.functional.interpolate(torch.tensor(images)[:, None], size=(28, 28), mode="bilinear")
    np.testing.assert_allclose(ours, theirs[:, 0].numpy(), atol=1e-5)


def test_digits_layout_and_split() -> None:
    x_train, y_train, x_test, y_test = digits()
    assert (x_train.shape, y_train.shape, x_test.shape, y_test.shape) == ((1438, 1, 28, 28), (1438,), (359, 1, 28, 28),
                                                                          (359,))  # fmt: skip
    assert x_train.dtype == y_test.dtype == dtypes.uint8
    train, test = x_train.numpy(), y_test.numpy()
    assert train.max() == 255
    assert train.min() == 0
    assert set(np.unique(test).tolist()) == set(range(10))
    again = digits()
    np.testing.assert_array_equal(again[0].numpy(), train)  # deterministic
    other = digits(seed=1)[1].numpy()
    assert not np.array_equal(other, y_train.numpy())  # the seed picks the split


def test_digits_are_the_sklearn_digits_upscaled() -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x_train, y_train, x_test, y_test = datasets.load_digits_arrays(size=8, test_fraction=0.5, seed=3)
    images = np.concatenate([x_train, x_test]).astype(np.int64)
    labels = np.concatenate([y_train, y_test])
    order = np.random.default_rng(3).permutation(len(bunch.target))
    order = np.concatenate([order[898:], order[:898]])  # train first, then the 898 held out (round(898.5))
    np.testing.assert_array_equal(labels, bunch.target[order])
    np.testing.assert_array_equal(images, np.rint(bunch.images[order] * 255 / 16))  # size 8: no resampling


def test_digits_errors() -> None:
    with pytest.raises(
        ValueError, match=r"digits: test_fraction out of range: got 1.0, expected 0 < test_fraction < 1"
    ):
        digits(test_fraction=1.0)
    with pytest.raises(ValueError, match=r"digits: size too small: got 4, expected at least 8"):
        digits(size=4)


# *** text corpus ***


def test_vocab_encode_decode() -> None:
    assert VOCAB_SIZE == len(VOCAB) + 1 == 97
    text = "def f(x):\n    return x ~ {'a': 1}\n"
    ids = encode(text)
    assert ids.dtype == np.uint8
    assert len(ids) == len(text)
    assert decode(ids) == text
    assert decode(encode("a\tb\u00e9\U0001f600")) == "a\ufffdb\ufffd\ufffd"  # one unknown id per character
    assert encode("\t").tolist() == [UNKNOWN_ID]
    assert decode([0, 1, 34]) == "\n A"
    assert encode("").shape == (0,)


def test_decode_rejects_bad_ids() -> None:
    with pytest.raises(ValueError, match=r"decode: id out of range: got 0..97, expected 0..96"):
        decode([0, 97])
    with pytest.raises(ValueError, match=r"decode: id out of range: got -1..3"):
        decode(np.array([3, -1]))


def make_tree(root: pathlib.Path) -> None:
    for i in range(10):
        (root / "pkg").mkdir(parents=True, exist_ok=True)
        (root / f"mod{i}.py").write_text(f"x = {i}\n" * (i + 1))
        (root / "pkg" / f"sub{i}.py").write_text(f"y{i} = 'b'\r\n")  # universal newlines read this as "\n"
    for skipped in ("site-packages", "test", "__pycache__"):
        (root / skipped).mkdir()
        (root / skipped / "hidden.py").write_text("HIDDEN\n")
    (root / "notes.txt").write_text("NOT PYTHON\n")


def test_stdlib_corpus_on_a_tree(tmp_path: pathlib.Path) -> None:
    make_tree(tmp_path)
    corpus = stdlib_corpus(max_bytes=10_000, val_fraction=0.25, seed=5, root=tmp_path)
    files = corpus.train_files + corpus.val_files
    assert sorted(files) == sorted([f"mod{i}.py" for i in range(10)] + [f"pkg/sub{i}.py" for i in range(10)])
    assert not set(corpus.train_files) & set(corpus.val_files)
    val_text = "".join((tmp_path / f).read_text() + "\n" for f in corpus.val_files)
    assert corpus.decode(corpus.val) == val_text
    assert "HIDDEN" not in corpus.decode(corpus.train)
    assert "\r" not in corpus.decode(corpus.train)
    total = len(corpus.train) + len(corpus.val)
    assert 0.25 * total <= len(corpus.val) < 0.25 * total + 40  # the first files past a quarter, whole
    again = stdlib_corpus(max_bytes=10_000, val_fraction=0.25, seed=5, root=tmp_path)
    assert again.val_files == corpus.val_files
    np.testing.assert_array_equal(again.train, corpus.train)
    assert stdlib_corpus(max_bytes=10_000, val_fraction=0.25, seed=6, root=tmp_path).val_files != corpus.val_files


def test_stdlib_corpus_cap(tmp_path: pathlib.Path) -> None:
    make_tree(tmp_path)
    corpus = stdlib_corpus(max_bytes=60, val_fraction=0.5, root=tmp_path)
    on_disk = sum((tmp_path / f).stat().st_size for f in corpus.train_files + corpus.val_files)
    assert on_disk + len(corpus.train_files) + len(corpus.val_files) <= 60  # a newline closes each file
    assert len(corpus.train_files) + len(corpus.val_files) >= 2


def test_stdlib_corpus_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match=r"stdlib_corpus: max_bytes too small: got 0, expected at least 1"):
        stdlib_corpus(max_bytes=0)
    with pytest.raises(ValueError, match=r"val_fraction out of range: got 0, expected 0 < val_fraction < 1"):
        stdlib_corpus(val_fraction=0)
    (tmp_path / "only.py").write_text("pass\n")
    with pytest.raises(ValueError, match=r"too few files to hold some out: got 1 under .*, expected at least 2"):
        stdlib_corpus(root=tmp_path)


def test_stdlib_corpus_of_this_python() -> None:
    corpus = stdlib_corpus(max_bytes=300_000, val_fraction=0.1, seed=0)
    assert 200_000 < len(corpus.train) + len(corpus.val) <= 300_000
    assert corpus.train.dtype == corpus.val.dtype == np.uint8
    assert corpus.vocab_size == VOCAB_SIZE
    assert np.mean(corpus.train == UNKNOWN_ID) < 0.01  # Python sources are nearly all printable ASCII
    assert all(f.endswith(".py") and "site-packages" not in f for f in corpus.train_files)
