"""Shards are written with O_DIRECT where the filesystem takes it (stages.lib.io._write_direct):
the same bytes as np.save, no copy left in the page cache, and a fall-back to the buffered write
(with its one-line errors) where O_DIRECT is refused or writes short."""
import ctypes
import io
import mmap
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from stages.lib import io as stage_io
from stages.lib.data.shards import save_npy
from tests.fake_model_project import limit_file_size

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


def takes_direct_io(folder: Path) -> bool:
    """Whether folder's filesystem opens files with O_DIRECT (ext4, xfs: yes; tmpfs before
    Linux 6.6: no)."""
    probe = folder / ".probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except (AttributeError, OSError):
        return False
    os.close(fd)
    probe.unlink()
    return True


def cached_pages(path: Path) -> int:
    """How many of path's pages are in the page cache (mincore(2) over a read-only map)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        vec = (ctypes.c_ubyte * pages)()
        assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec)


def npy_bytes(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


@pytest.fixture
def direct_dir(tmp_path):
    if not takes_direct_io(tmp_path):
        pytest.skip(f"{tmp_path}: this filesystem refuses O_DIRECT (the buffered write is "
                    f"what runs here, covered by test_scale_prepare)")
    return tmp_path


# around the 8 MiB staging buffer's edges and O_DIRECT's 4 KiB blocks (the .npy header is 128)
@pytest.mark.parametrize("nbytes", [MiB, 8 * MiB - 128, 8 * MiB - 127, 8 * MiB,
                                    16 * MiB + 4096 - 128, 20 * MiB + 1])
def test_a_direct_write_has_np_save_bytes_and_leaves_the_page_cache_empty(direct_dir, nbytes):
    array = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    path = direct_dir / "images-00000.npy"
    save_npy(path, array)
    assert path.read_bytes() == npy_bytes(array)  # (this read fills the cache)
    tmp = save_npy(direct_dir / "b.npy", array, pending=True)
    assert cached_pages(Path(tmp)) == 0  # written past the cache: O_DIRECT was used
    stage_io.commit(tmp, direct_dir / "b.npy")
    assert (direct_dir / "b.npy").read_bytes() == npy_bytes(array)
    assert sorted(p.name for p in direct_dir.iterdir()) == ["b.npy", "images-00000.npy"]


def test_the_buffered_write_fills_the_page_cache(direct_dir, monkeypatch):
    """The measure above can fail: the buffered write (PIPELINE_DIRECT_IO=0, and every file
    under 1 MiB) leaves its pages cached."""
    array = np.arange(4 * MiB, dtype=np.uint8)
    monkeypatch.setenv("PIPELINE_DIRECT_IO", "0")
    tmp = save_npy(direct_dir / "a.npy", array, pending=True)
    assert cached_pages(Path(tmp)) > 0
    monkeypatch.delenv("PIPELINE_DIRECT_IO")
    tmp = save_npy(direct_dir / "small.npy", array[:MiB - 129], pending=True)
    assert cached_pages(Path(tmp)) > 0
    tmp = save_npy(direct_dir / "b.npy", array, pending=True)
    assert cached_pages(Path(tmp)) == 0
    assert Path(tmp).read_bytes() == npy_bytes(array)


def write_in_a_worker(seed: int) -> tuple:
    path = Path(os.environ["DIRECT_TEST_DIR"]) / f"s{seed}.npy"
    array = np.full(9 * MiB, seed, dtype=np.uint8)
    for _ in range(3):
        save_npy(path, array)
        assert path.read_bytes() == npy_bytes(array)
    return seed, os.getpid()


def test_forked_workers_write_their_own_bytes(direct_dir, monkeypatch):
    """The staging buffer is per process: workers forked after the parent wrote (and made its
    buffer) each write their own bytes, at the same time."""
    monkeypatch.setenv("DIRECT_TEST_DIR", str(direct_dir))
    save_npy(direct_dir / "parent.npy", np.full(2 * MiB, 255, dtype=np.uint8))
    import multiprocessing

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        done = list(pool.map(write_in_a_worker, range(6)))
    assert [seed for seed, _ in done] == list(range(6))
    for seed in range(6):
        assert (direct_dir / f"s{seed}.npy").read_bytes() == npy_bytes(
            np.full(9 * MiB, seed, dtype=np.uint8))
    assert np.all(np.load(direct_dir / "parent.npy") == 255)


WRITERS = {  # the same 20 MiB of ones, by save_npy and streamed as a decode fills its buffer
    "save_npy": "save_npy(Path(sys.argv[1]), np.ones(20 * 2 ** 20, dtype=np.uint8))",
    "streamed": "fill_streamed(Path(sys.argv[1]), np.ones((20 * 1024, 1024), dtype=np.uint8), "
                "range(1000, 20000, 1000))"}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("limit", [3 * MiB, 9 * MiB])
def test_a_file_size_limit_mid_write_is_the_one_line_error(tmp_path, limit, writer):
    """A limit under the first 8 MiB block (O_DIRECT refuses the cut, unaligned write) and one
    past it (the second block writes short): the buffered write takes over and fails with the
    usual error naming the shard; no temp file is left."""
    script = ("import sys, numpy as np; from pathlib import Path\n"
              "from stages.lib.io import StageError; from stages.lib.data.shards import save_npy\n"
              "from tests.test_direct_write import fill_streamed\n"
              f"try: {WRITERS[writer]}\n"
              "except StageError as e: sys.exit(f'Error: {e.message}')\n")
    path = tmp_path / "images-00003.npy"
    proc = subprocess.run([sys.executable, "-c", script, str(path)], cwd=ROOT, text=True,
                          capture_output=True, preexec_fn=limit_file_size(limit))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"Error: {path}: cannot write it: File too large (the disk, a quota or a file-size "
        f"limit is full). Free space on {tmp_path} and re-run; the outs already there are "
        f"complete (writes are atomic)."]
    assert list(tmp_path.iterdir()) == []


# prepare's images shards: io.StreamedWrite sends the file to the disk while the decode fills
# its buffer (shards.NpyBuffer: the .npy header in front of the array, page-aligned)

def fill_streamed(path: Path, array: np.ndarray, steps, on_block=None) -> str:
    """Copy array into a NpyBuffer in `steps` pieces, as a decode would, telling a
    StreamedWrite after each; on_block(writer, done) is called after each piece."""
    from stages.lib.data.shards import NpyBuffer

    buf = NpyBuffer(array.shape, array.dtype)
    x = buf.array(array.shape, array.dtype)
    per = x[0].nbytes
    with stage_io.StreamedWrite(path, buf.memory, buf.file_size(array.shape, array.dtype)) as w:
        start = 0
        for stop in [*steps, len(array)]:
            x[start:stop] = array[start:stop]
            w.advance(buf.header_size + stop * per)
            if on_block:
                on_block(w, stop)
            start = stop
        return w.finish()


def file_size_soon(fd_path: str, want: int) -> int:
    """The temp file's size once the writer thread has written `want` bytes (or 10 s on)."""
    import time

    deadline = time.monotonic() + 10
    while os.stat(fd_path).st_size < want and time.monotonic() < deadline:
        time.sleep(0.005)
    return os.stat(fd_path).st_size


# rows of 1 KiB: around the 8 MiB blocks and the 4 KiB pages (the header is 128 bytes)
@pytest.mark.parametrize("rows", [1024, 8191, 8192, 16 * 1024 + 3, 20 * 1024])
def test_a_streamed_write_is_np_save_bytes_sent_while_the_array_fills(direct_dir, rows):
    array = np.random.default_rng(rows).integers(0, 256, (rows, 1024), dtype=np.uint8)
    seen = []

    def on_block(writer, stop):  # whole blocks are on the disk before the last row is in
        if stop < rows:
            seen.append(file_size_soon(writer.tmp, (128 + stop * 1024) // (8 * MiB) * 8 * MiB))

    steps = list(range(1000, rows, 1000))
    tmp = fill_streamed(direct_dir / "images-00000.npy", array, steps, on_block)
    assert cached_pages(Path(tmp)) == 0  # O_DIRECT, straight from the buffer
    stage_io.commit(tmp, direct_dir / "images-00000.npy")
    assert (direct_dir / "images-00000.npy").read_bytes() == npy_bytes(array)
    assert [p.name for p in direct_dir.iterdir()] == ["images-00000.npy"]
    want = [(128 + s * 1024) // (8 * MiB) * 8 * MiB for s in steps]
    assert seen == want and (rows < 9000 or max(seen) >= 8 * MiB)


def test_a_streamed_write_falls_back_to_the_buffered_write(direct_dir, monkeypatch):
    """PIPELINE_DIRECT_IO=0 (and every file under 1 MiB): nothing goes out before finish(), then
    the same bytes, buffered (their pages cached)."""
    array = np.random.default_rng(0).integers(0, 256, (10 * 1024, 1024), dtype=np.uint8)
    monkeypatch.setenv("PIPELINE_DIRECT_IO", "0")
    sizes = []
    tmp = fill_streamed(direct_dir / "a.npy", array, [9000],
                        lambda w, stop: sizes.append(os.stat(w.tmp).st_size))
    assert sizes == [0, 0] and cached_pages(Path(tmp)) > 0
    assert Path(tmp).read_bytes() == npy_bytes(array)
    monkeypatch.delenv("PIPELINE_DIRECT_IO")
    small = array[:1000]
    tmp = fill_streamed(direct_dir / "b.npy", small, [500])
    assert cached_pages(Path(tmp)) > 0 and Path(tmp).read_bytes() == npy_bytes(small)


def test_a_failed_fill_leaves_no_temp_file_and_no_writer_thread(direct_dir):
    import threading

    array = np.ones((20 * 1024, 1024), dtype=np.uint8)
    before = threading.active_count()

    def fail(writer, stop):
        if stop == 17000:
            assert file_size_soon(writer.tmp, 16 * MiB) >= 16 * MiB  # two blocks written
            raise RuntimeError("decode failed")

    with pytest.raises(RuntimeError, match="decode failed"):
        fill_streamed(direct_dir / "images-00001.npy", array, [9000, 17000], fail)
    assert list(direct_dir.iterdir()) == []
    assert threading.active_count() == before


def test_prepare_streams_its_shards_with_the_same_bytes_whatever_the_path(direct_dir,
                                                                          monkeypatch):
    """prepare at 160 px RGB, shards of 20 (1.5 MiB: streamed direct; val's 12 images: under
    1 MiB, buffered): 1 and 2 workers, and PIPELINE_DIRECT_IO=0, give the same bytes; the
    direct runs leave the big shards out of the page cache, so the streamed path ran."""
    from tests.conftest import run_stage
    from tests.test_scale_prepare import digest, make_dataset
    from tools.project import set_params

    make_dataset(direct_dir)
    set_params(direct_dir, {"prepare.image_size": 160, "prepare.channels": 3,
                            "prepare.mean": [0.5] * 3, "prepare.std": [0.5] * 3,
                            "prepare.shard_size": 20})
    trees, cached = [], []
    for workers, direct in ((1, "1"), (2, "1"), (2, "0")):
        set_params(direct_dir, {"prepare.workers": workers})
        monkeypatch.setenv("PIPELINE_DIRECT_IO", direct)
        proc = run_stage("prepare", cwd=direct_dir)
        assert proc.returncode == 0, proc.stderr
        out = direct_dir / "data/processed"
        cached.append([cached_pages(out / f"{split}/images-00000.npy")  # before any read
                       for split in ("train", "val")])
        trees.append(digest(out))
    assert trees[0] == trees[1] == trees[2]
    assert np.load(out / "train/images-00001.npy").shape == (16, 160, 160, 3)
    assert [c[0] for c in cached] == [0, 0, cached[2][0]] and cached[2][0] > 0
    assert all(c[1] > 0 for c in cached)  # val: 12 images, under 1 MiB, buffered


def test_a_failed_fill_is_the_error_reported_even_when_a_block_failed_too(tmp_path):
    """The decode fails after the writer thread hit the file-size limit (block 2 starts past a
    3 MiB limit: EFBIG): the decode's error comes out, not the write's; no temp file stays."""
    script = ("import sys, numpy as np; from pathlib import Path\n"
              "from tests.test_direct_write import fill_streamed\n"
              "def fail(w, stop):\n"
              "    if stop == 19000: raise RuntimeError('decode failed at 19000')\n"
              "fill_streamed(Path(sys.argv[1]), np.ones((20 * 1024, 1024), dtype=np.uint8),\n"
              "              range(1000, 20000, 1000), fail)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "images-00004.npy")],
                          cwd=ROOT, text=True, capture_output=True,
                          preexec_fn=limit_file_size(3 * MiB))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "RuntimeError: decode failed at 19000"
    assert list(tmp_path.iterdir()) == []
