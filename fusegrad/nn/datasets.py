"""Datasets for the examples (stage 10, nn): MNIST read from IDX files (downloaded once, SHA-256 checked, cached),
scikit-learn's handwritten digits upscaled to 28x28 as an offline stand-in, and a character-level corpus built from
the Python standard library's sources. Entry points: `mnist`, `digits`, `stdlib_corpus`.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import sysconfig
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fusegrad.nn.state import write_atomically
from fusegrad.tensor import Tensor

Fetcher = Callable[[str], bytes]  # url -> the bytes found there (tests inject one; the default uses urllib)

# *** IDX files (the MNIST container format) ***

# IDX header: two zero bytes, a type code, the number of dimensions, then one big-endian uint32 per dimension;
# the data follows in row-major order, big-endian
IDX_DTYPES: dict[int, np.dtype[np.generic]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
GZIP_MAGIC = b"\x1f\x8b"


def gunzip_if_needed(data: bytes, name: str = "idx") -> bytes:
    """The bytes themselves, or their gzip decompression when they start with the gzip magic number."""
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError; a cut-off stream is an EOFError
        raise ValueError(f"parse_idx: {name} is not a valid gzip stream ({e}): got {len(data)} bytes") from None


def parse_idx(data: bytes, name: str = "idx") -> np.ndarray:
    """Decode an IDX file (gzipped or not) into a numpy array with the file's shape, in native byte order.

    Raises ValueError naming `name` for a bad magic number, an unknown type code, or data shorter or longer than
    the header announces. Example: `parse_idx(open("t10k-labels-idx1-ubyte.gz", "rb").read()).shape == (10000,)`.
    """
    raw = gunzip_if_needed(data, name)
    if len(raw) < 4:
        raise ValueError(f"parse_idx: {name} is truncated: got {len(raw)} bytes, expected a 4-byte magic number")
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"parse_idx: {name} has a bad magic number: got {raw[:4].hex()}, expected 0000<type><ndim>")
    if (dtype := IDX_DTYPES.get(raw[2])) is None:
        codes = ", ".join(f"0x{c:02x}" for c in IDX_DTYPES)
        raise ValueError(f"parse_idx: {name} has an unknown type code: got 0x{raw[2]:02x}, expected one of {codes}")
    ndim, header = raw[3], 4 + 4 * raw[3]
    if len(raw) < header:
        raise ValueError(f"parse_idx: {name} is truncated in its header: got {len(raw)} bytes, expected {header}")
    shape = tuple(int(x) for x in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "longer than its header says"
        raise ValueError(f"parse_idx: {name} is {what}: got {len(raw)} bytes, expected {expected} for shape {shape}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


# *** downloads ***


def _downloads_dir_flag() -> str:
    # TODO(#7): DOWNLOADS_DIR belongs in helpers.py with the other flags; read here until it is declared there
    return os.environ.get("DOWNLOADS_DIR", "")


def downloads_dir() -> pathlib.Path:
    """Where downloaded datasets are cached: $DOWNLOADS_DIR, else <$XDG_CACHE_HOME or ~/.cache>/fusegrad/downloads."""
    if flag := _downloads_dir_flag():
        return pathlib.Path(flag)
    cache_home = os.environ.get("XDG_CACHE_HOME", "") or os.path.expanduser("~/.cache")
    return pathlib.Path(cache_home) / "fusegrad" / "downloads"


def fetch_url(url: str) -> bytes:
    """The bytes at `url` (http(s) or file://), read with urllib."""
    import urllib.request  # on first download only: `import fusegrad.nn` loads this module, most runs never fetch

    with urllib.request.urlopen(url, timeout=60) as response:
        data: bytes = response.read()
    return data


def fetch(url: str, sha256: str, cache_dir: str | pathlib.Path | None = None, fetcher: Fetcher | None = None) -> bytes:
    """The bytes of `url`, from the cache when a file there has the expected SHA-256, else downloaded and cached.

    Downloads are checked before they are stored: a mismatch raises ValueError and leaves nothing in the cache. A
    cached file that no longer matches (cut short, edited) is fetched again. Example: `fetch(url, digest)`.
    """
    path = pathlib.Path(cache_dir if cache_dir is not None else downloads_dir()) / url.rsplit("/", 1)[-1]
    if path.is_file() and hashlib.sha256(cached := path.read_bytes()).hexdigest() == sha256:
        return cached
    data = (fetcher or fetch_url)(url)
    if (digest := hashlib.sha256(data).hexdigest()) != sha256:
        raise ValueError(
            f"fetch: checksum mismatch for {url} ({len(data)} bytes): got sha256 {digest}, expected {sha256}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    # write then rename (fsynced), so a concurrent or killed download never leaves a half-written file under the name
    with write_atomically(path) as f:
        f.write(data)
    return data


# *** MNIST ***

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
# SHA-256 of each file, in MNIST_FILES order
MNIST_SHA256 = (
    "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
)
FASHION_MNIST_SHA256 = (
    "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
)


def check_image_set(images: np.ndarray, labels: np.ndarray, name: str) -> None:
    """Raise ValueError unless images are (N, 28, 28) uint8 and labels (N,) uint8 digits 0..9."""
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"mnist: {name} images have the wrong layout: got {images.dtype} {images.shape}, expected uint8 (N, 28, 28)"
        )
    if labels.dtype != np.uint8 or labels.shape != images.shape[:1]:
        raise ValueError(
            f"mnist: {name} labels do not match the images: got {labels.dtype} {labels.shape}, "
            f"expected uint8 ({len(images)},)"
        )
    if labels.size and int(labels.max()) > 9:
        raise ValueError(f"mnist: {name} labels out of range: got max {int(labels.max())}, expected 0..9")


def load_mnist_arrays(
    fashion: bool = False, cache_dir: str | pathlib.Path | None = None, fetcher: Fetcher | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, Y_train, X_test, Y_test) as numpy uint8 arrays, images (N, 28, 28); see `mnist`."""
    base, digests = (FASHION_MNIST_URL, FASHION_MNIST_SHA256) if fashion else (MNIST_URL, MNIST_SHA256)
    # both sets name their files alike: each gets its own folder, so neither evicts the other from the cache
    folder = pathlib.Path(cache_dir if cache_dir is not None else downloads_dir()) / (
        "fashion-mnist" if fashion else "mnist"
    )
    arrays = [
        parse_idx(fetch(base + name, digest, folder, fetcher), name)
        for name, digest in zip(MNIST_FILES, digests, strict=True)
    ]
    check_image_set(arrays[0], arrays[1], "train")
    check_image_set(arrays[2], arrays[3], "test")
    return arrays[0], arrays[1], arrays[2], arrays[3]


def mnist(
    device: str | None = None,
    fashion: bool = False,
    cache_dir: str | pathlib.Path | None = None,
    fetcher: Fetcher | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """MNIST (or Fashion-MNIST) as (X_train, Y_train, X_test, Y_test) uint8 Tensors on `device`.

    Shapes (60000, 1, 28, 28), (60000,), (10000, 1, 28, 28), (10000,). The four files are downloaded once into
    <cache_dir>/mnist (or /fashion-mnist), cache_dir defaulting to `downloads_dir()`, and checked against their
    SHA-256. Raises ValueError for a checksum mismatch or a corrupt file, and urllib's URLError when offline.
    Example: `X_train, Y_train, X_test, Y_test = mnist()`.
    """
    x_train, y_train, x_test, y_test = load_mnist_arrays(fashion, cache_dir, fetcher)
    return images_and_labels(x_train, y_train, x_test, y_test, device)


def images_and_labels(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, device: str | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Numpy (N, H, W) images and (N,) labels as Tensors: images (N, 1, H, W) (one channel)."""
    return (
        Tensor(x_train[:, None], device=device),
        Tensor(y_train, device=device),
        Tensor(x_test[:, None], device=device),
        Tensor(y_test, device=device),
    )


# *** offline stand-in: scikit-learn's handwritten digits ***


def resize_bilinear(images: np.ndarray, size: int) -> np.ndarray:
    """(N, h, w) float images -> (N, size, size), bilinear with pixel centres aligned (like align_corners=False)."""

    def weights(n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # source coordinate of each output pixel centre, clamped to the outermost input centres
        pos = np.clip((np.arange(size) + 0.5) * n_in / size - 0.5, 0, n_in - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, (pos - lo).astype(np.float32)

    y_lo, y_hi, y_frac = weights(images.shape[1])
    x_lo, x_hi, x_frac = weights(images.shape[2])
    rows = images[:, y_lo] * (1 - y_frac)[:, None] + images[:, y_hi] * y_frac[:, None]  # (N, size, w)
    resized: np.ndarray = rows[:, :, x_lo] * (1 - x_frac) + rows[:, :, x_hi] * x_frac  # (N, size, size)
    return resized


def load_digits_arrays(
    size: int = 28, test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, Y_train, X_test, Y_test): scikit-learn's 1797 8x8 digits upscaled to size x size, uint8 arrays."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"digits: test_fraction out of range: got {test_fraction}, expected 0 < test_fraction < 1")
    if size < 8:
        raise ValueError(f"digits: size too small: got {size}, expected at least 8 (the source images are 8x8)")
    try:
        from sklearn.datasets import load_digits  # type: ignore[import-untyped]  # scikit-learn ships no type hints
    except ImportError:
        raise ImportError("digits: needs scikit-learn, which ships the data: pip install 'fusegrad[train]'") from None
    bunch = load_digits()
    images = resize_bilinear(np.asarray(bunch.images, dtype=np.float32), size)  # values 0..16
    pixels = np.clip(np.rint(images * (255 / 16)), 0, 255).astype(np.uint8)
    labels = np.asarray(bunch.target, dtype=np.uint8)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = max(1, round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return pixels[train], labels[train], pixels[test], labels[test]


def digits(
    device: str | None = None, size: int = 28, test_fraction: float = 0.2, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """scikit-learn's handwritten digits laid out like `mnist()`: an offline stand-in that needs no download.

    1797 8x8 images (values 0..16) are upscaled bilinearly to size x size, scaled to 0..255 uint8 and split by a
    seeded permutation: with the defaults (1438, 1, 28, 28) train and (359, 1, 28, 28) test images, uint8 labels.
    Raises ValueError for a test_fraction outside (0, 1), ImportError without scikit-learn.
    Example: `X_train, Y_train, X_test, Y_test = digits()`.
    """
    return images_and_labels(*load_digits_arrays(size, test_fraction, seed), device)


# *** a character-level text corpus: the standard library's Python sources ***

# id 0 is newline, ids 1..95 are printable ASCII ' '..'~', id 96 stands for any other character (tabs, non-ASCII)
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))
UNKNOWN_ID = len(VOCAB)
UNKNOWN_CHAR = "\ufffd"  # what decode prints for UNKNOWN_ID
VOCAB_SIZE = len(VOCAB) + 1
_ENCODE_TABLE = np.full(128, UNKNOWN_ID, dtype=np.uint8)
_ENCODE_TABLE[[ord(c) for c in VOCAB]] = np.arange(len(VOCAB), dtype=np.uint8)
_DECODE_TABLE = np.array([*VOCAB, UNKNOWN_CHAR])
SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})


def encode(text: str) -> np.ndarray:
    """Character ids (np.uint8, one per character) of `text` in the corpus vocabulary (see VOCAB)."""
    codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return np.where(codepoints < 128, _ENCODE_TABLE[np.minimum(codepoints, 127)], UNKNOWN_ID).astype(np.uint8)


def decode(ids: np.ndarray | Sequence[int]) -> str:
    """The text of character ids; UNKNOWN_ID reads as U+FFFD. Raises ValueError for an id outside 0..VOCAB_SIZE-1."""
    array = np.asarray(ids, dtype=np.int64).reshape(-1)
    if array.size and (array.min() < 0 or array.max() >= VOCAB_SIZE):
        raise ValueError(
            f"decode: id out of range: got {int(array.min())}..{int(array.max())}, expected 0..{VOCAB_SIZE - 1}"
        )
    return "".join(_DECODE_TABLE[array].tolist())


@dataclass(frozen=True, slots=True)
class Corpus:
    """Character ids of held-in (`train`) and held-out (`val`) files, each file followed by a newline."""

    train: np.ndarray  # (n_train,) np.uint8 ids
    val: np.ndarray  # (n_val,) np.uint8 ids
    train_files: tuple[str, ...] = field(default=())  # paths relative to the stdlib root
    val_files: tuple[str, ...] = field(default=())
    vocab: str = VOCAB  # id i is vocab[i]; id len(vocab) is the unknown character
    vocab_size: int = VOCAB_SIZE

    def encode(self, text: str) -> np.ndarray:
        return encode(text)

    def decode(self, ids: np.ndarray | Sequence[int]) -> str:
        return decode(ids)


def stdlib_sources(root: pathlib.Path) -> list[tuple[str, int]]:
    """(relative path, size in bytes) of every .py file under root, sorted, skipping SKIPPED_DIRS."""
    found: list[tuple[str, int]] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            if name.endswith(".py") and (path := pathlib.Path(directory) / name).is_file():
                found.append((path.relative_to(root).as_posix(), path.stat().st_size))
    return sorted(found)


def pick_files(sources: list[tuple[str, int]], max_bytes: int, seed: int) -> list[str]:
    """Files in a seeded random order, each kept whole if it and its closing newline still fit in max_bytes."""
    order = np.random.default_rng(seed).permutation(len(sources))
    picked, budget = [], max_bytes
    for i in order.tolist():
        path, size = sources[i]
        if 0 < size < budget:
            picked.append(path)
            budget -= size + 1
    return picked


def stdlib_corpus(
    max_bytes: int = 4_000_000, val_fraction: float = 0.1, seed: int = 0, root: str | pathlib.Path | None = None
) -> Corpus:
    """A character-level corpus of the Python standard library's sources (every Python install has them).

    The .py files under `root` (default `sysconfig.get_paths()["stdlib"]`, without site-packages or test folders) are
    listed in sorted order, shuffled by `seed` and kept whole while they fit (each plus a closing newline) in
    `max_bytes`; the first kept files, about `val_fraction` of the text, are held out for validation. Text is read as
    UTF-8 with universal newlines. Raises ValueError for bad arguments or too few files.
    Example: `c = stdlib_corpus(); c.decode(c.train[:80])`.
    """
    if max_bytes < 1:
        raise ValueError(f"stdlib_corpus: max_bytes too small: got {max_bytes}, expected at least 1")
    if not 0 < val_fraction < 1:
        raise ValueError(f"stdlib_corpus: val_fraction out of range: got {val_fraction}, expected 0 < val_fraction < 1")
    base = pathlib.Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    picked = pick_files(stdlib_sources(base), max_bytes, seed)
    texts = [(base / path).read_text(encoding="utf-8", errors="replace") + "\n" for path in picked]
    sizes = np.cumsum([len(t) for t in texts])
    n_val = int(np.searchsorted(sizes, val_fraction * sizes[-1])) + 1 if len(texts) else 0
    if n_val >= len(texts):
        raise ValueError(
            f"stdlib_corpus: too few files to hold some out: got {len(texts)} under {base}, expected at least 2"
        )
    return Corpus(
        train=encode("".join(texts[n_val:])),
        val=encode("".join(texts[:n_val])),
        train_files=tuple(picked[n_val:]),
        val_files=tuple(picked[:n_val]),
    )
