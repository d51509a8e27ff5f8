"""The audio modality's core: the one definition of how a sound file becomes model input.

prepare, evaluate, export, predict and serve all go through `features` (read the samples,
mix to mono, resample to the feature rate, pad or crop to a fixed length, log-mel, quantise)
so the model never sees a clip prepared two ways. A stored sample is a log-mel spectrogram as
one channel: uint8 n_mels x frames x 1, dB relative to the clip's own loudest cell (a per-clip
normalisation) over AUDIO_RANGE_DB, so the shards, value counts, normalisation and thumbnails
every modality shares apply unchanged.

The feature settings travel as one spec (audiospec.py AudioSpec: sample_rate, n_fft, hop,
n_mels, frames; params.yaml's prepare.audio), recorded in meta.json, model.pt and the ONNX
metadata, and handed back to decode/read by every consumer (as a dict inside this module).
numpy and soundfile only (no torch): an ONNX consumer can compute the features without it.
Every sum is float64 in a fixed order (the resampler's taps one by one; numpy's FFT and one
matrix product for the mel bands), then rounded to uint8.
"""
import functools
import threading

import numpy as np

from stages.lib.modality.errors import decode_error

AUDIO_RANGE_DB = 80.0  # the dB below the clip's loudest cell that map to 0..255
REF_FLOOR_DB = -20.0  # a clip quieter than this is not scaled up (silence stays dark)
F_MIN = 20.0
# the fingerprint's own fixed settings (never the params': a hash must not move with them)
HASH_SPEC = {"sample_rate": 16000, "n_fft": 512, "hop": 160, "n_mels": 32, "frames": 101}
# the manifest columns inspect fills, in order; the error kinds it writes
FIELDS = ("format", "subtype", "sample_rate", "channels", "frames", "duration", "peak", "rms",
          "nonfinite", "clipped", "error_kind", "error", "mel_hash")
INSPECT_ERRORS = ("undecodable", "duration")
CLIP_LEVEL = 0.999  # |sample| at or above this (full scale 1.0) counts as clipped


def settings_of(spec) -> dict:
    """The feature settings of an AudioSpec, as the dict the functions below read."""
    return spec.settings


def riff_truncation(head: bytes, size: int) -> str:
    """Why a WAV file (its first bytes and its size) is truncated, or "": libsndfile reads a
    cut-off WAV without an error, as the frames that are there, so its RIFF and data chunk
    sizes are compared with the file's (a size of 0 or 0xFFFFFFFF: a stream's, unknown)."""
    import struct

    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return ""
    riff = struct.unpack("<I", head[4:8])[0]
    if riff not in (0, 0xFFFFFFFF) and riff + 8 > size:
        return f"truncated: the RIFF header declares {riff + 8} bytes, the file has {size}"
    pos = 12
    while pos + 8 <= len(head):
        cid, n = head[pos:pos + 4], struct.unpack("<I", head[pos + 4:pos + 8])[0]
        if cid == b"data":
            if n not in (0, 0xFFFFFFFF) and pos + 8 + n > size:
                return (f"truncated: the data chunk declares {n} bytes, {size - pos - 8} "
                        f"are there")
            return ""
        pos += 8 + n + (n & 1)
    return ""


class TooLong(OverflowError):
    """A clip longer than the limit, refused from its header: soundfile's (format, subtype,
    rate, channels, frames) in `info`."""

    def __init__(self, info: tuple):
        super().__init__(f"{info[4] / info[2]:.1f} s" if info[2] else f"{info[4]} frames")
        self.info = info


def read_samples(src, max_seconds: float = 0):
    """(float64 samples, frames x channels; sample rate; soundfile's (format, subtype, rate,
    channels, frames)) of a path or a binary file object, fully decoded. A truncated file is
    a ValueError; max_seconds > 0: a file declaring a longer clip is refused (TooLong) before
    its samples are read."""
    import soundfile as sf

    if not hasattr(src, "read"):
        with open(src, "rb") as f:
            return read_samples(f, max_seconds)
    start = src.tell()
    head = src.read(4096)
    src.seek(0, 2)
    size = src.tell() - start
    src.seek(start)
    why = riff_truncation(head, size)
    if why:
        raise ValueError(why)
    with sf.SoundFile(src) as f:
        if max_seconds and f.frames > max_seconds * f.samplerate:
            raise TooLong((f.format, f.subtype, f.samplerate, f.channels, f.frames))
        data = f.read(dtype="float64", always_2d=True)
        info = (f.format, f.subtype, f.samplerate, f.channels, f.frames)
    if len(data) != info[4]:  # a header promising more frames than the data holds
        raise ValueError(f"truncated: the header declares {info[4]} frames, {len(data)} "
                         f"decoded")
    return data, info[2], info


def mono(data: np.ndarray) -> np.ndarray:
    """frames x channels -> frames: the mean of the channels (float64), NaN/inf as 0."""
    x = data[:, 0].copy() if data.shape[1] == 1 else data.mean(axis=1)
    x[~np.isfinite(x)] = 0.0
    return x


def _taps_at(src: int, dst: int, start: int, n: int):
    """(input indices, weights) of a windowed-sinc resampler from src to dst Hz for outputs
    start..start+n: 2 x 16 taps per output (more when downsampling), a Hann window, cut off
    at the lower Nyquist."""
    half = 16
    cutoff = min(1.0, dst / src)
    width = int(np.ceil(half / cutoff))
    t = (np.arange(start, start + n, dtype=np.float64) * src) / dst
    base = np.floor(t).astype(np.int64)
    offs = np.arange(-width + 1, width + 1, dtype=np.int64)
    idx = base[:, None] + offs[None, :]
    d = t[:, None] - idx
    w = cutoff * np.sinc(cutoff * d) * np.where(np.abs(d) < width,
                                                0.5 * (1 + np.cos(np.pi * d / width)), 0.0)
    return idx, w


TAPS_CACHE_BYTES = 64 * 2**20  # the filter tables kept between calls, at most
BLOCK_ELEMENTS = 2**18  # outputs x taps summed per block: bounded working memory
_TAPS: dict = {}  # (src, dst) -> (P, Q, indices, weights), oldest first
_TAPS_LOCK = threading.Lock()  # serve decodes in several threads


def _taps_size(src: int, dst: int) -> tuple:
    """(P outputs per period, taps per output) of the resampler from src to dst Hz."""
    import math

    cutoff = min(1.0, dst / src)
    return dst // math.gcd(src, dst), 2 * int(np.ceil(16 / cutoff))


def resample_bytes(src: int, dst: int) -> int:
    """The most memory resample(x, src, dst) holds besides its input and output: its filter
    table (int64 indices and float64 weights per tap of one period) and one block of
    BLOCK_ELEMENTS taps (building the table, or gathering indices, weights, values and masks
    to sum: about 12 arrays of a block's size at once)."""
    if src == dst or src <= 0 or dst <= 0:
        return 0
    period, taps = _taps_size(src, dst)
    block = max(BLOCK_ELEMENTS, taps) * 8 * 12
    return period * taps * 16 + block


def _period_taps(src: int, dst: int):
    """(P, Q, indices, weights) of one period of the resampler: the taps of outputs 0..P-1,
    P = dst / gcd, Q = src / gcd (output k = m * P + j takes output j's weights, its indices
    shifted by m * Q inputs). Kept for the next call while the kept tables stay within
    TAPS_CACHE_BYTES (oldest dropped first); a larger table is computed for this call only."""
    import math

    key = (src, dst)
    with _TAPS_LOCK:
        if key in _TAPS:
            _TAPS[key] = _TAPS.pop(key)  # the most recent last
            return _TAPS[key]
    g = math.gcd(src, dst)
    period, taps = _taps_size(src, dst)
    idx, w = np.empty((period, taps), np.int64), np.empty((period, taps), np.float64)
    rows = max(1, BLOCK_ELEMENTS // taps)  # built in blocks: row by row the same numbers
    for j in range(0, period, rows):
        n = min(rows, period - j)
        idx[j:j + n], w[j:j + n] = _taps_at(src, dst, j, n)
    found = (period, src // g, idx, w)
    size = idx.nbytes + w.nbytes
    if size <= TAPS_CACHE_BYTES:
        with _TAPS_LOCK:
            while _TAPS and _kept() + size > TAPS_CACHE_BYTES:
                _TAPS.pop(next(iter(_TAPS)))
            _TAPS[key] = found
    return found


def _kept() -> int:
    return sum(t[2].nbytes + t[3].nbytes for t in _TAPS.values())


def cached_taps_bytes() -> int:
    """The bytes of the filter tables kept between calls (at most TAPS_CACHE_BYTES)."""
    with _TAPS_LOCK:
        return _kept()


def resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """float64 mono samples from src to dst Hz: a windowed-sinc filter (_taps_at), its
    weights computed once per period of the rate ratio, its taps summed one by one
    (element-wise, in a fixed order: the same bits on every CPU), BLOCK_ELEMENTS taps at a
    time (resample_bytes: the memory it needs)."""
    x = np.asarray(x, dtype=np.float64)
    if src == dst or len(x) == 0:
        return x.copy()
    n_out = len(x) * dst // src
    period, shift, idx0, w0 = _period_taps(src, dst)
    taps = idx0.shape[1]
    out = np.empty(n_out, dtype=np.float64)
    rows = max(1, BLOCK_ELEMENTS // taps)  # outputs per block
    for k0 in range(0, n_out, rows):
        k = np.arange(k0, min(k0 + rows, n_out), dtype=np.int64)
        j = k % period
        idx = idx0[j] + ((k // period) * shift)[:, None]
        w = w0[j]
        vals = np.where((idx >= 0) & (idx < len(x)), x[np.clip(idx, 0, len(x) - 1)], 0.0)
        acc = np.zeros(len(k), dtype=np.float64)
        for t in range(taps):
            acc += vals[:, t] * w[:, t]
        out[k0:k0 + len(k)] = acc
    return out


def fixed_length(x: np.ndarray, n: int) -> np.ndarray:
    """x centred in n samples: zero-padded both sides when shorter, its middle when longer."""
    if len(x) >= n:
        start = (len(x) - n) // 2
        return x[start:start + n]
    out = np.zeros(n, dtype=np.float64)
    left = (n - len(x)) // 2
    out[left:left + len(x)] = x
    return out


@functools.lru_cache(maxsize=8)
def mel_matrix(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """(n_fft // 2 + 1) x n_mels triangular filters on the HTK mel scale, F_MIN..Nyquist."""
    def mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def hz(m):
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    edges = hz(np.linspace(mel(F_MIN), mel(sample_rate / 2), n_mels + 2))
    freqs = np.arange(n_fft // 2 + 1) * sample_rate / n_fft
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None, :] - lo) / (mid - lo)
    down = (hi - freqs[None, :]) / (hi - mid)
    return np.maximum(0.0, np.minimum(up, down)).T.copy()


@functools.lru_cache(maxsize=8)
def _window(n_fft: int) -> np.ndarray:
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann


def log_mel_db(x: np.ndarray, spec: dict) -> np.ndarray:
    """n_mels x frames log-mel power (dB) of mono float64 samples at spec's rate, already of
    (frames - 1) * hop samples: centred frames (reflect-padded by n_fft // 2)."""
    n_fft, hop = spec["n_fft"], spec["hop"]
    pad = n_fft // 2
    y = np.pad(x, pad, mode="reflect") if len(x) > pad else np.pad(x, pad)
    n = 1 + (len(y) - n_fft) // hop
    frames = np.lib.stride_tricks.as_strided(y, (n, n_fft), (y.strides[0] * hop, y.strides[0]))
    power = np.abs(np.fft.rfft(frames * _window(n_fft), axis=1)) ** 2
    mel = power @ mel_matrix(spec["sample_rate"], n_fft, spec["n_mels"])
    return (10.0 * np.log10(mel + 1e-10)).T


def quantise(db: np.ndarray) -> np.ndarray:
    """dB -> uint8: the loudest cell (at least REF_FLOOR_DB) is 255, AUDIO_RANGE_DB below is 0."""
    ref = max(float(db.max(initial=-1e9)), REF_FLOOR_DB)
    scaled = (np.clip(db - ref, -AUDIO_RANGE_DB, 0.0) + AUDIO_RANGE_DB) * (255.0 / AUDIO_RANGE_DB)
    return np.round(scaled).astype(np.uint8)


def wave_features(x: np.ndarray, rate: int, spec: dict) -> np.ndarray:
    """Mono float64 samples at `rate` -> the stored sample, uint8 n_mels x frames x 1."""
    x = resample(x, rate, spec["sample_rate"])
    x = fixed_length(x, (spec["frames"] - 1) * spec["hop"])
    return quantise(log_mel_db(x, spec))[..., None]


def features(src, spec: dict, max_seconds: float = 0) -> tuple:
    """(the stored sample of a file (path or binary file object), uint8 n_mels x frames x 1;
    its (frames, sample rate)), from one full decode."""
    data, rate, info = read_samples(src, max_seconds)
    return wave_features(mono(data), rate, spec), (info[4], rate)


@functools.lru_cache(maxsize=8)
def _dct_rows(n: int, keep: int = 8) -> np.ndarray:
    """The 8 lowest DCT-II basis rows of length n."""
    k, x = np.arange(keep)[:, None], np.arange(n)[None, :]
    return 2.0 * np.cos(np.pi * k * (2 * x + 1) / (2 * n))


def mel_hash(x: np.ndarray, rate: int) -> str:
    """16 hex digits: a perceptual hash of a clip's log-mel (HASH_SPEC): the 8 x 8 lowest
    2-D DCT frequencies against their median, as the picture modality's phash
    (near-duplicates differ in a few bits; a louder or quieter copy is the same clip)."""
    q = wave_features(x, rate, HASH_SPEC)[..., 0].astype(np.float64)
    low = (_dct_rows(q.shape[0]) @ q @ _dct_rows(q.shape[1]).T).ravel()
    median = float(np.median(low))
    return np.packbits(low > median).tobytes().hex()


def inspect(path, limit: int = 0, with_phash: bool = True) -> dict:
    """What a full decode of a sound file (path or binary file object) finds; `error` is
    empty when it decodes. limit: the longest clip decoded, in seconds (0 = no limit; ingest
    passes validate.max_seconds, the modality's input limit): a file declaring a longer one is
    never decoded, its header's facts kept and its error the duration check's. peak and rms
    are of every channel's samples, full scale 1.0; nonfinite counts NaN and infinite samples
    (float files), clipped the share of samples at full scale."""
    facts = dict.fromkeys(FIELDS, "")
    try:
        data, rate, info = read_samples(path, limit)
    except TooLong as exc:
        fmt, subtype, rate, channels, frames = exc.info
        facts.update(format=fmt, subtype=subtype, sample_rate=rate, channels=channels,
                     frames=frames, duration=f"{frames / rate:.4f}" if rate else "0",
                     error_kind="duration",
                     error=f"duration {frames / rate:.3f} s over validate.max_seconds "
                           f"({limit:g} s): never decoded")
        return facts
    except Exception as exc:  # libsndfile's errors, truncation: every one means "unusable"
        facts.update(error_kind="undecodable", error=f"cannot decode: {decode_error(exc, path)}")
        return facts
    fmt, subtype, rate, channels, frames = info
    finite = np.isfinite(data)
    good = data[finite]
    facts.update(format=fmt, subtype=subtype, sample_rate=rate, channels=channels,
                 frames=frames, duration=f"{frames / rate:.4f}" if rate else "0",
                 peak=f"{float(np.abs(good).max(initial=0.0)):.6f}",
                 rms=f"{float(np.sqrt(np.mean(good ** 2))) if good.size else 0.0:.6f}",
                 nonfinite=int(data.size - good.size),
                 clipped=f"{float(np.mean(np.abs(good) >= CLIP_LEVEL)) if good.size else 0:.6f}",
                 error_kind="", error="")
    if with_phash and frames:
        facts["mel_hash"] = mel_hash(mono(data), rate)
    return facts


def fingerprint(row) -> int | None:
    """A manifest row's log-mel hash as a 64-bit int (Hamming distance: how alike two clips
    sound), or None when it says nothing: no hash or an error."""
    if row.get("mel_hash") and not row.get("error"):
        return int(row["mel_hash"], 16)
    return None


def input_shape(spec) -> tuple:
    """One stored sample's shape, (n_mels, frames, 1), of an AudioSpec."""
    return spec.shape


def input_spec(meta: dict) -> tuple:
    """One model input's shape, (1, n_mels, frames), from meta's stored spec."""
    from stages.lib.modality.audiospec import AudioSpec

    n_mels, frames, channels = AudioSpec.from_meta(meta).shape
    return (channels, n_mels, frames)


def warmup_input(spec) -> np.ndarray:
    """A stored sample the model can run on before any request: silence (all 0)."""
    return np.zeros(spec.shape, dtype=np.uint8)


def decode(path, spec, facts=None, sizes=None):
    """(the stored sample of one file, uint8 n_mels x frames x 1; its (frames, sample rate)).
    facts: a list that gets (frames, True) (the fit facts: prepare's hints); sizes: a list
    that gets (frames, sample rate)."""
    x, size = features(path, settings_of(spec))
    if facts is not None:
        facts.append((size[0], True))
    if sizes is not None:
        sizes.append(size)
    return x, size


def normalize(batch: np.ndarray, mean, std) -> np.ndarray:
    """uint8 N x n_mels x frames x 1 -> float32 N x 1 x n_mels x frames: scaled to [0, 1],
    then ((x / 255) - mean) / std in float32, element by element (as every modality)."""
    n, h, w, c = batch.shape
    x = np.empty((n, c, h, w), dtype=np.float32)
    np.copyto(x, batch.transpose(0, 3, 1, 2), casting="unsafe")
    np.divide(x, np.float32(255.0), out=x)
    np.subtract(x, np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)[:, :c], out=x)
    np.divide(x, np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)[:, :c], out=x)
    return x


def normalize_tensor(batch, mean, std):
    """normalize on a torch uint8 N x n_mels x frames x C batch on any device (train's device
    batches): the float32 ops every modality shares (tensors.py), element by element, with
    mean and std cut to the batch's channels as normalize cuts them."""
    from stages.lib.modality.tensors import normalize_tensor as shared_normalize

    c = batch.shape[-1]
    return shared_normalize(batch, np.atleast_1d(np.asarray(mean, dtype=np.float32))[:c].tolist(),
                           np.atleast_1d(np.asarray(std, dtype=np.float32))[:c].tolist())


def thumbnail(ax, sample) -> None:
    """One stored sample (uint8 n_mels x frames x 1) drawn as a spectrogram: time across, low
    frequencies at the bottom."""
    ax.imshow(sample[..., 0], origin="lower", aspect="auto", cmap="magma", vmin=0, vmax=255,
              interpolation="nearest")

