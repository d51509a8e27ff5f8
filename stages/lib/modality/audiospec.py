"""The audio modality's input spec: how a sound file becomes model input, from prepare to serve.

A clip is read, mixed to mono, resampled to `sample_rate`, padded or cropped (centred) to
(frames - 1) x hop samples and turned into `n_mels` log-mel bands of `frames` frames (an FFT of
`n_fft` samples every `hop` samples; stages/lib/modality/audiocore.py), then normalised with
mean and std. The project's params.yaml holds it as prepare.audio (a mapping of KEYS; missing
keys take DEFAULTS), prepare.mean and prepare.std; data/processed/meta.json and a model's
metadata store it under the recipe's keys (stages/lib/modality/spec.py). Its input limit is
in seconds: validate.max_seconds (ingest, validate), --max-seconds (predict, serve).
"""
import math
from dataclasses import asdict, dataclass, fields

from stages.lib.modality.spec import RECIPE, SIZE

PARAMS_KEY = "prepare.audio"  # where params.yaml holds the spec's settings
LIMIT_KEY = "validate.max_seconds"  # the longest clip, in seconds (validate)
MAX_SECONDS = 30.0  # validate.max_seconds' default and predict's and serve's --max-seconds
FIT_FRAMES = (26, 301)  # init's frames for one's own data: 0.25 s to 3 s at 10 ms a frame


@dataclass(frozen=True)
class AudioSpec:
    """The log-mel front end (sample_rate Hz, n_fft and hop samples, n_mels bands, frames per
    clip) and the normalisation (mean and std, one value: a spectrogram has one channel)."""

    sample_rate: int = 16000
    n_fft: int = 512
    hop: int = 160
    n_mels: int = 40
    frames: int = 101
    mean: tuple = (0.5,)
    std: tuple = (0.5,)

    @property
    def settings(self) -> dict:
        """The front end's settings, in KEYS' order: what params.yaml and meta.json hold."""
        return {k: getattr(self, k) for k in KEYS}

    @property
    def seconds(self) -> float:
        """The length every clip is padded or cropped to."""
        return (self.frames - 1) * self.hop / self.sample_rate

    @property
    def shape(self) -> tuple:
        """One stored sample's shape: uint8 n_mels x frames x 1."""
        return (self.n_mels, self.frames, 1)

    def describe(self) -> str:
        """The spec in words: what prepare, init and the report say of it."""
        return (f"log-mel {self.n_mels} bands x {self.frames} frames at {self.sample_rate} Hz "
                f"(n_fft {self.n_fft}, hop {self.hop}): {self.seconds:g} s clips")

    @classmethod
    def of(cls, settings=None, mean=(0.5,), std=(0.5,)) -> "AudioSpec":
        """The spec of a settings mapping (params' prepare.audio or the stored size), DEFAULTS
        filling the keys it lacks."""
        given = {k: int(v) for k, v in (settings or {}).items() if k in KEYS}
        return cls(**given, mean=tuple(mean), std=tuple(std))

    @classmethod
    def from_meta(cls, meta) -> "AudioSpec":
        """The spec stored in meta.json or a model's metadata (the recipe's keys)."""
        return cls.of(meta[SIZE], meta.get("mean", (0.5,)), meta.get("std", (0.5,)))

    def to_meta(self) -> dict:
        """The recipe as meta.json and a model's metadata store it (spec.RECIPE's order)."""
        return dict(zip(RECIPE, (self.settings, 1, list(self.mean), list(self.std)),
                        strict=True))


KEYS = tuple(f.name for f in fields(AudioSpec) if f.name not in ("mean", "std"))
DEFAULTS = {k: v for k, v in asdict(AudioSpec()).items() if k in KEYS}


def problems(settings) -> list[str]:
    """Why a prepare.audio mapping is not a log-mel front end: unknown keys, values that are no
    integer >= 1, a hop over n_fft, more mel bands than FFT bins, too few frames or too low a
    rate; [] when it is one."""
    if not isinstance(settings, dict):
        return [f"{PARAMS_KEY} must be a mapping of {', '.join(KEYS)}, got {settings!r}"]
    unknown = sorted(map(str, set(settings) - set(KEYS)))
    if unknown:
        return [f"{PARAMS_KEY}: unknown key(s) {', '.join(unknown)}; it holds "
                f"{', '.join(KEYS)}"]
    bad = [k for k, v in settings.items() if isinstance(v, bool) or not isinstance(v, int)
           or v < 1]
    if bad:
        return [f"{PARAMS_KEY}.{k} must be an integer >= 1, got {settings[k]!r}" for k in bad]
    full = {**DEFAULTS, **settings}
    out = []
    if full["hop"] > full["n_fft"]:
        out.append(f"{PARAMS_KEY}: hop ({full['hop']}) must be at most n_fft ({full['n_fft']})")
    if full["n_mels"] > full["n_fft"] // 2 + 1:
        out.append(f"{PARAMS_KEY}: n_mels ({full['n_mels']}) must be at most n_fft // 2 + 1 "
                   f"({full['n_fft'] // 2 + 1})")
    if full["frames"] < 2 or full["sample_rate"] < 1000:
        out.append(f"{PARAMS_KEY}: frames must be at least 2 and sample_rate at least 1000 Hz")
    return out


def fit(clips: list) -> tuple:
    """(settings, why) for one's own data (tools.init) from the clips' header facts [(split,
    frames, sample rate, ...)]: DEFAULTS with frames covering 90% of the train clips (all
    clips when none is marked train), within FIT_FRAMES."""
    train = [c for c in clips if c[0] == "train"] or clips
    seconds = sorted(f / r for _, f, r, *_ in train if r)
    p90 = seconds[int(0.9 * (len(seconds) - 1))] if seconds else 1.0
    settings = dict(DEFAULTS)
    frames = 1 + math.ceil(p90 * settings["sample_rate"] / settings["hop"])
    settings["frames"] = min(FIT_FRAMES[1], max(FIT_FRAMES[0], frames))
    return settings, (f"log-mel at {settings['sample_rate']} Hz; frames cover 90% of the "
                      f"train clips ({p90:.2f} s or shorter)")


def max_frames(seconds: float, rate: int) -> int:
    """The most frames a clip at `rate` Hz may have under a limit in seconds (0: none)."""
    return int(seconds * rate) if seconds else 0
