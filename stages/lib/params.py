"""The one typed loader for params.yaml, with every choice and range declared beside its field.

A key that is not declared here (a typo such as `train.lr_rate`), a value of the wrong type, a
value outside its declared choices or range, or a combination a section's `problems()` rejects
is an error that names the key and what is allowed, so a bad knob never reaches a stage.

Each stage reads its own section; the few reads across sections are declared once, in
`STAGE_PARAMS` (stages/lib/door.py), which dvc.yaml's `params:` lists must match (a test checks
it). The top-level `task` key names the task (a package under stages/tasks/); task-shaped knobs
live in the stage section that reads them (validate.classes, evaluate.calibration_bins...).
"""
import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from stages.lib.io import StageError
from stages.lib.modality import AUDIO  # the audio modality's keys are marked with its name
from stages.lib.modality import audiospec  # prepare.audio: its keys, defaults and problems
from stages.lib.modality.imagegate import FORMATS, MAX_PIXELS  # the image knobs' defaults
from stages.lib.modality.spec import AUTO  # prepare's "chosen from the data"
from stages.lib.userfiles import read_yaml

PARAMS_FILE = "params.yaml"
DEFAULT_TASK = "classification"
# the widest CTC prefix beam search predict and serve run (--beam K): its time grows about as
# K squared per line (64: up to 0.4 s a line on 2 cores, 128: 1.3 s; 100000 ran for minutes)
MAX_BEAM = 64
# validate.max_boxes: its default (crowd and shelf images hold hundreds to thousands) and the
# most it may be: 100,000 boxes of about 100 characters each stay far below a manifest field's
# limit (stages.lib.csvlimit.FIELD_LIMIT)
MAX_BOXES, MAX_BOXES_CAP = 10_000, 100_000
# "no weights file": a git-tracked placeholder that train.init_from and evaluate.compare_with
# name by default, because dvc.yaml lists those params as deps and DVC fails on an empty path
NO_WEIGHTS = "weights/none"
# export.formats' names (stages/lib/model/formats.py exports them): here, so that parsing the
# params imports no export code, and every stage's code deps stay free of it
EXPORT_FORMATS = ("onnx", "openvino", "onnx_int8", "tensorrt")


def knob(default, *, choices=None, at_least=None, above=None, at_most=None, below=None,
         modality=None):
    """A field with its allowed values: `choices`, or bounds (inclusive `at_least`/`at_most`,
    exclusive `above`/`below`). Lists (mutable defaults) are copied per instance.

    modality: a key only that modality's tasks read (audio's gate and SpecAugment): the
    params.yaml of another modality's task does not hold it, and at its default it is hashed
    as before it existed (MODALITY_KEYS, without_placement), so adding it changed no image
    task's dvc.lock, provenance or checkpoint fingerprint."""
    meta = {k: v for k, v in (("choices", choices), ("at_least", at_least), ("above", above),
                              ("at_most", at_most), ("below", below), ("modality", modality))
            if v is not None}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Data:
    source: str = "data/sample"  # the dataset, in one of the task's layouts


@dataclass(frozen=True)
class Sample:
    per_class: int = knob(0, at_least=0)  # first N images of each class; 0 keeps all
    # detection, segmentation: images written; 0 = the task's default (1,000 and 600)
    images: int = knob(0, at_least=0)
    lines: int = knob(0, at_least=0)  # ocr: text lines written; 0 = the task's 2,400
    clips: int = knob(0, at_least=0, modality=AUDIO)  # speech: clips written; 0 = 2,000


@dataclass(frozen=True)
class Ingest:
    workers: int = knob(0, at_least=0)  # processes that hash and decode; 0 = all cores
    # rehash cached files each run: a seeded sample, all of them, or none; a mismatch fails
    verify_cache: str = knob("sample", choices=["sample", "all", "none"])


@dataclass(frozen=True)
class Validate:
    min_side: int = knob(8, at_least=1)  # images with a smaller width or height are rejected
    max_pixels: int = knob(MAX_PIXELS, at_least=1)  # larger images are never decoded (bombs)
    formats: list[str] = knob(FORMATS)  # the modality's format names (images: Pillow's)
    classes: list[str] = knob([])  # expected class names; [] = any
    min_per_class: int = knob(5, at_least=0)  # fewest usable images a class may have
    max_imbalance: float = knob(20.0, at_least=1.0)  # largest class / smallest class, at most
    near_dup_distance: int = knob(4, at_least=-1, at_most=64)  # phash bits; -1 = off
    on_error: str = knob("fail", choices=("fail", "quarantine"))  # quarantine: list, go on
    min_box_px: float = knob(2.0, at_least=0.0)  # detection: smallest box side, in pixels
    box_tolerance: float = knob(0.01, at_least=0.0)  # detection: corners may pass 0-1 by this
    require_labels: bool = False  # detection: an image with no label file blocks (not background)
    # detection: most boxes one image may have (a label file's lines, a COCO image's
    # annotations); more is the error too_many_boxes. Ingest reads it: it bounds the memory
    # and the manifest field of one image (at most MAX_BOXES_CAP)
    max_boxes: int = knob(MAX_BOXES, at_least=1, at_most=MAX_BOXES_CAP)
    charset: str = ""  # ocr: every character a transcript may hold; "" = any (the model's
    #                    charset is then the training split's characters)
    max_aspect: float = knob(2.0, above=0.0)  # ocr: a line's height / width, at most
    # audio (stages/lib/modality/audiogate.py): a clip shorter or longer than these (seconds)
    # is refused; an RMS under silence_db (dB full scale) is silent; more than max_clipped of
    # the samples at full scale is clipping (both warnings)
    min_seconds: float = knob(0.1, at_least=0.0, modality=AUDIO)
    # audio's input limit: ingest decodes no longer clip (predict and serve: --max-seconds)
    max_seconds: float = knob(audiospec.MAX_SECONDS, above=0.0, modality=AUDIO)
    silence_db: float = knob(-60.0, below=0.0, modality=AUDIO)
    max_clipped: float = knob(0.01, at_least=0.0, at_most=1.0, modality=AUDIO)


@dataclass(frozen=True)
class Split:
    # hash: stable as data grows | time: chronological | given: the dataset's own split
    by: str = knob("hash", choices=("hash", "time", "given"))
    seed: int = 42
    # given: the share of train carved out as val (test) when the data has no val (test) split
    val: float = knob(0.15, above=0.0, below=1.0)
    test: float = knob(0.15, above=0.0, below=1.0)
    balance_z: float = knob(4.0, at_least=0.0)  # per-class share tolerance, in binomial sds
    on_imbalance: str = knob("warn", choices=("warn", "fail"))  # a class's share off target

    def problems(self) -> list[str]:
        if self.val + self.test >= 1:
            return [f"split.val + split.test must be below 1 (got {self.val} + {self.test}): "
                    f"the train split would be empty"]
        return []


def old_audio_form(settings: dict) -> str:
    """The one line that refuses a log-mel mapping under prepare.image_size (an audio or
    speech project's form before prepare.audio), naming the new keys."""
    shown = ", ".join(f"{k}: {settings.get(k, v)}" for k, v in audiospec.DEFAULTS.items())
    return (f"prepare.image_size is an image size; an audio or speech task's log-mel settings "
            f"go under {audiospec.PARAMS_KEY} ({{{shown}}}): move them there and remove "
            f"prepare.image_size")


@dataclass(frozen=True)
class Prepare:
    # each of these four: a value, or auto = a deterministic function of the data, chosen and
    # explained by prepare (stages/lib/data/autoprep.py) and recorded in data/processed/meta.json
    # (auto image_size and channels are the defaults: the digits sample gets 16 px grey from
    # them, your own data its own size and colour; mean/std [0.5] is every channel's)
    # images: pixels per side, >= 1 | auto: median shorter side, rounded... (a mapping here is
    # the old form of prepare.audio, refused with a line naming it)
    image_size: int | dict | str = AUTO
    channels: int | str = AUTO  # 1 = greyscale, 3 = RGB | auto: 1 only when every image is grey
    mean: list[float] | str = knob([0.5])  # per channel, or one for all | auto: the train split's
    std: list[float] | str = knob([0.5])  # per channel, or one for all | auto: the train split's
    shard_size: int = knob(1024, at_least=1)  # samples per shard file; memory is per shard
    workers: int = knob(0, at_least=0)  # decoding processes; 0 = all cores
    # where the decoding runs: local = prepare.workers processes here; ray = the tasks of a Ray
    # cluster (stages/prepare_ray.py), this process writing the shards. Same outs either way.
    engine: str = knob("local", choices=("local", "ray"))
    # engine ray: the cluster's address (HOST:6379, or ray://HOST:10001); "" = a cluster on
    # this machine alone, started for the run (prepare.workers CPUs)
    ray_address: str = ""
    # engine ray: where the tasks read the images: path = data.source at its absolute path on
    # every node (a shared filesystem); remote = data.source's files as `dvc push` left them on
    # the project's default DVC remote (S3), each node with its own S3 credentials
    ray_inputs: str = knob("path", choices=("path", "remote"))
    # text lines: > 0 resizes each image to this height, aspect kept, right-padded (or squeezed)
    # to `width`, instead of image_size x image_size; 0 = off (square images)
    height: int = knob(0, at_least=0)
    width: int = knob(0, at_least=0)  # with height: the padded width of every line
    # with height: widths (px, ascending, each < width) a line is cropped to in training and
    # evaluation (the smallest that holds it; `width` is the last); [] = every line at `width`
    width_buckets: list[int] = knob([])
    # square inputs: true keeps the aspect, scales the longer side to image_size and pads the
    # rest (grey 114, centred); false squashes; auto = the task's default (detection: true)
    letterbox: bool | str = AUTO
    # audio and speech: the log-mel front end (stages/lib/modality/audiospec.py), a mapping of
    # sample_rate (Hz), n_fft, hop (samples), n_mels (bands) and frames (per clip: clips are
    # padded or cropped to (frames - 1) * hop samples); a key left out takes its default
    audio: dict = knob({}, modality=AUDIO)

    def problems(self) -> list[str]:
        out = []
        if isinstance(self.letterbox, str) and self.letterbox != AUTO:
            out.append(f"`prepare.letterbox` must be true, false or auto, got "
                       f"{self.letterbox!r}")
        if self.height and self.width < self.height:
            out.append(f"prepare.width must be at least prepare.height ({self.height}) when "
                       f"prepare.height is set, got {self.width}")
        if self.ray_address and self.engine != "ray":
            out.append(f"`prepare.ray_address` ({self.ray_address!r}) is only used with "
                       f"prepare.engine: ray; set prepare.engine to ray or ray_address to \"\"")
        if self.ray_inputs != "path" and self.engine != "ray":
            out.append(f"`prepare.ray_inputs: {self.ray_inputs}` needs prepare.engine: ray")
        if self.width_buckets and not self.height:
            out.append("prepare.width_buckets needs prepare.height (text lines)")
        if self.width_buckets and (self.width_buckets != sorted(set(self.width_buckets))
                                   or self.width_buckets[0] < 1
                                   or self.width_buckets[-1] >= self.width):
            out.append(f"prepare.width_buckets must be ascending widths, each once, from 1 to "
                       f"below prepare.width ({self.width}): {self.width_buckets}")
        if self.audio:
            out += audiospec.problems(self.audio)
        if isinstance(self.image_size, dict):
            out.append(old_audio_form(self.image_size))
        elif not (self.image_size == AUTO or isinstance(self.image_size, int)
                  and self.image_size >= 1):
            out.append(f"`prepare.image_size` must be an integer >= 1 or auto, "
                       f"got {self.image_size!r}")
        if self.channels not in (1, 3, AUTO):
            out.append(f"`prepare.channels` must be one of 1, 3, auto, got {self.channels!r}")
        for name in ("mean", "std"):
            if isinstance(getattr(self, name), str) and getattr(self, name) != AUTO:
                out.append(f"`prepare.{name}` must be a list (one value per channel) or auto, "
                           f"got {getattr(self, name)!r}")
        if out:
            return out
        if (self.mean == AUTO) != (self.std == AUTO):
            return ["prepare.mean and prepare.std are both auto or both lists"]
        if self.mean != AUTO and self.channels != AUTO and (
                len(self.mean) not in (1, self.channels)
                or len(self.std) not in (1, self.channels)):
            return [f"prepare.mean and prepare.std need one value per channel, or one for "
                    f"every channel (prepare.channels is {self.channels}; got {len(self.mean)} "
                    f"and {len(self.std)})"]
        if self.mean != AUTO and len(self.mean) != len(self.std):
            return ["prepare.mean and prepare.std need the same number of values"]
        if self.std != AUTO and any(s <= 0 for s in self.std):
            return ["prepare.std values must be above 0"]
        return []


@dataclass(frozen=True)
class Train:
    model: str = "small_cnn"  # or a torchvision architecture name, e.g. resnet18
    epochs: int = knob(15, at_least=1)
    batch_size: int = knob(32, at_least=1)
    lr: float = knob(0.003, above=0.0)
    optimizer: str = knob("adamw", choices=("adamw", "sgd"))
    weight_decay: float = knob(0.0001, at_least=0.0)
    warmup_epochs: int = knob(0, at_least=0)  # linear warm-up epochs before the cosine decay
    label_smoothing: float = knob(0.0, at_least=0.0, below=1.0)
    grad_accum_steps: int = knob(1, at_least=1)  # micro-batches per optimiser step
    grad_clip: float = knob(0.0, at_least=0.0)  # max global gradient norm; 0 = off
    # decay of an average of the weights (stages/lib/train/ema.py) that is validated and becomes
    # model.pt; 0 = off (the last weights)
    ema: float = knob(0.0, at_least=0.0, below=1.0)
    # precision is never called "off": YAML 1.1 (PyYAML) reads a bare off as false, and
    # `dvc exp run -S` rewrites params.yaml without quotes
    precision: str = knob("fp32", choices=("fp32", "bf16", "fp16"))  # fp32: mixed precision off
    seed: int = 0
    num_workers: int = knob(0, at_least=0)  # DataLoader worker processes; never changes results
    deterministic: bool = True  # torch deterministic algorithms (+ cuDNN/cuBLAS flags on GPU)
    aug_crop_scale: float = knob(1.0, above=0.0, at_most=1.0)  # random resized crop; 1.0 = off
    aug_hflip: float = knob(0.0, at_least=0.0, at_most=1.0)  # horizontal flip probability
    aug_rotate: float = knob(0.0, at_least=0.0, at_most=180.0)  # max rotation in degrees
    aug_jitter: float = knob(0.0, at_least=0.0)  # brightness/contrast jitter strength
    aug_stretch: float = knob(0.0, at_least=0.0, below=1.0)  # ocr: max horizontal squeeze
    aug_blur: float = knob(0.0, at_least=0.0, at_most=1.0)  # ocr: probability of a 3x3 blur
    # ocr, strokes (stages/tasks/ocr/strokeaug.py; 0 = off): probability of a grey-level
    # erode/dilate, max italic shear (tangent), max height squeeze, elastic warp (pixels), paper
    # texture amplitude, max downscale-upscale loss, probability of JPEG-like artefacts
    aug_stroke: float = knob(0.0, at_least=0.0, at_most=1.0)
    aug_shear: float = knob(0.0, at_least=0.0, at_most=1.0)
    aug_aspect: float = knob(0.0, at_least=0.0, below=1.0)
    aug_elastic: float = knob(0.0, at_least=0.0, at_most=8.0)
    aug_texture: float = knob(0.0, at_least=0.0, at_most=1.0)
    aug_downscale: float = knob(0.0, at_least=0.0, below=1.0)
    aug_jpeg: float = knob(0.0, at_least=0.0, at_most=1.0)
    # ocr: the line box cropped tighter or padded looser, zoom up to 1 + this either way
    # (stages/tasks/ocr/cropaug.py); 0 = off
    aug_crop_line: float = knob(0.0, at_least=0.0, at_most=2.0)
    # ocr, the paper (stages/tasks/ocr/paperaug.py; 0 = off): the largest change of the
    # paper's light from edge to edge, in grey ranges; the largest share of pixels made specks
    aug_gradient: float = knob(0.0, at_least=0.0, at_most=2.0)
    aug_specks: float = knob(0.0, at_least=0.0, at_most=0.1)
    # detection: half the images shrink by up to this factor onto a padded canvas; 1 = off
    aug_zoom_out: float = knob(1.0, at_least=1.0, at_most=4.0)
    # audio, SpecAugment (stages/lib/modality/audioaug.py): aug_masks time and aug_masks
    # frequency masks per clip, each up to aug_time_mask frames / aug_freq_mask mel bands
    # wide (0 = off)
    aug_time_mask: int = knob(0, at_least=0, modality=AUDIO)
    aug_freq_mask: int = knob(0, at_least=0, modality=AUDIO)
    aug_masks: int = knob(2, at_least=0, at_most=8, modality=AUDIO)
    # audio: every mel band moved up or down by up to this many bands (0 = off)
    aug_freq_shift: int = knob(0, at_least=0, at_most=8, modality=AUDIO)
    # audio, the room and the microphone (stages/lib/modality/audioroom.py; 0 = off): speed
    # and pitch (semitones) up or down by up to these, probabilities of a reverberant room,
    # background noise (at an SNR in dB drawn from [snr_min, snr_max]; the speech first moved
    # by up to aug_gain dB), a random band-pass, a telephone codec
    aug_speed: float = knob(0.0, at_least=0.0, at_most=0.3, modality=AUDIO)
    aug_pitch: float = knob(0.0, at_least=0.0, at_most=6.0, modality=AUDIO)
    aug_reverb: float = knob(0.0, at_least=0.0, at_most=1.0, modality=AUDIO)
    aug_noise: float = knob(0.0, at_least=0.0, at_most=1.0, modality=AUDIO)
    aug_noise_snr_min: float = knob(5.0, at_least=-10.0, at_most=60.0, modality=AUDIO)
    aug_noise_snr_max: float = knob(30.0, at_least=-10.0, at_most=60.0, modality=AUDIO)
    aug_gain: float = knob(0.0, at_least=0.0, at_most=20.0, modality=AUDIO)
    aug_bandlimit: float = knob(0.0, at_least=0.0, at_most=1.0, modality=AUDIO)
    aug_telephone: float = knob(0.0, at_least=0.0, at_most=1.0, modality=AUDIO)
    # weights file, checkpoint or previous model.pt to start from; NO_WEIGHTS (or "") = random
    # init. A path, so dvc.yaml can list it as a dep (DVC cannot depend on "": see NO_WEIGHTS)
    init_from: str = NO_WEIGHTS
    init_strict: bool = False  # any tensor not loaded as is (but a resized head) is an error
    freeze_backbone: bool = False  # with init_from: train only the head (= freeze all but it)
    freeze: list[str] = knob([])  # module-name patterns (fnmatch) whose parameters stay fixed
    lr_backbone: float = knob(0.0, at_least=0.0)  # lr of all but the head; 0 = train.lr
    adapter: str = knob("none", choices=("none", "lora"))  # lora: train low-rank adapters + head
    lora_rank: int = knob(8, at_least=1)
    lora_alpha: float = knob(16.0, above=0.0)  # adapter scale = lora_alpha / lora_rank
    lora_dropout: float = knob(0.0, at_least=0.0, below=1.0)
    lora_targets: list[str] = knob([])  # module-name patterns; [] = every conv/linear but head
    # trained: BatchNorm affine + running statistics train (and are checkpointed) | frozen:
    # BatchNorm stays in eval mode with the starting weights' statistics
    lora_batchnorm: str = knob("trained", choices=("trained", "frozen"))
    tensorboard: bool = False  # also write TensorBoard events to logs/tensorboard/ (untracked)
    checkpoint_every_steps: int = knob(0, at_least=0)  # also last.pt every N steps; 0 = epochs
    best_metric: str = knob("val_metric", choices=("val_metric", "val_loss"))  # picks best.pt
    nproc: int = knob(1, at_least=1)  # processes per machine; > 1 runs under torchrun (DDP)
    nnodes: int = knob(1, at_least=1)  # machines; > 1 meets at train.rdzv_endpoint (c10d)
    rdzv_endpoint: str = ""  # host:port of the c10d rendezvous (on the first machine)
    # intra-op threads per process: they order float sums, so under kernels: portable a fixed
    # count (part of dvc.lock); 0 = its share of the cores (native only)
    threads: int = knob(2, at_least=0)
    # portable: the same bytes on every x86-64 CPU with AVX2 | native: torch's fastest kernels
    # for this CPU (stages/lib/train/kernels.py)
    kernels: str = knob("portable", choices=("portable", "native"))
    # which weights become models/model.pt (and so evaluate, export, predict): the last
    # epoch's, or best.pt's (the epoch train.best_metric liked best)
    keep: str = knob("last", choices=("last", "best"))
    device: str = "auto"  # auto (a GPU when one is visible) | cpu | cuda | cuda:N
    # read the losses and the non-finite check back from the device every N batches (and
    # before a checkpoint, at the epoch's end): no host sync per step; never changes results
    sync_every: int = knob(50, at_least=1)
    # batches read, normalised and augmented on the device (stages/lib/train/devicedata.py): auto =
    # on a GPU only (on the CPU the per-sample path keeps its bytes) | on | off
    device_batches: str = knob("auto", choices=("auto", "on", "off"))
    # the train split stays on the device when it fits in this share of its free memory;
    # otherwise it streams batch by batch through pinned memory
    device_data_share: float = knob(0.5, above=0.0, at_most=1.0)

    def problems(self) -> list[str]:
        out = []
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")
                and self.device[5:].isdigit()):
            out.append(f"`train.device` must be auto, cpu, cuda or cuda:N (a GPU index), got "
                       f"{self.device!r}")
        elif self.device.startswith("cuda:") and self.nproc * self.nnodes > 1:
            out.append("train.device cuda:N names one GPU: with train.nproc or train.nnodes "
                       "> 1 use cuda (each process takes the GPU of its local rank)")
        if self.aug_noise_snr_min > self.aug_noise_snr_max:
            out.append(f"train.aug_noise_snr_min ({self.aug_noise_snr_min}) must be at most "
                       f"train.aug_noise_snr_max ({self.aug_noise_snr_max}): the noise's SNR "
                       f"is drawn between them")
        if self.batch_size < self.nproc * self.nnodes:
            out.append(f"train.batch_size ({self.batch_size}) is the global batch, split over "
                       f"train.nproc x train.nnodes ({self.nproc} x {self.nnodes}) processes: "
                       f"make it at least their product")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            out.append("train.nnodes > 1 needs train.rdzv_endpoint (host:port of the "
                       "rendezvous, reachable from every machine)")
        if self.warmup_epochs >= self.epochs:
            out.append(f"train.warmup_epochs must be below train.epochs ({self.epochs}), "
                       f"got {self.warmup_epochs}")
        if self.kernels == "portable" and not self.threads:
            out.append("train.threads 0 (the machine's share of the cores) makes the weights "
                       "depend on the core count; under train.kernels: portable set a fixed "
                       "count (2 is the default), or choose train.kernels: native")
        if self.freeze_backbone and self.init_from in ("", NO_WEIGHTS):
            out.append("train.freeze_backbone needs train.init_from (the weights to keep)")
        return out


@dataclass(frozen=True)
class Evaluate:
    batch_size: int = knob(256, at_least=1)
    bad_cases: int = knob(16, at_least=0)  # worst mistakes drawn in plots/eval/bad_cases.png
    calibration_bins: int = knob(15, at_least=1)  # equal-width bins of the calibration error
    # detection: precision/recall, drawn boxes, and the detections export's parity matches
    score_threshold: float = knob(0.3, at_least=0.0, at_most=1.0)
    # another model.pt (the previous run's) scored on the same test set, beside this one
    compare_with: str = NO_WEIGHTS  # NO_WEIGHTS (or "") = none


@dataclass(frozen=True)
class Export:
    atol: float = knob(0.0001, at_least=0.0)  # an item fails: |diff| > atol + rtol * max|ref|
    rtol: float = knob(0.0001, at_least=0.0)
    parity_samples: int = knob(0, at_least=0)  # test images checked (first N); 0 = all
    parity_batch: int = knob(64, at_least=1)  # the larger batch size tried besides 1
    torchscript: bool = False  # also write models/torchscript/model.pt, behind the same gate
    # formats written besides model.onnx (always written): openvino, onnx_int8, tensorrt (GPU)
    formats: list[str] = knob(["onnx"])
    # with formats beyond onnx: the largest loss of the task's headline test metric against
    # PyTorch (accuracy: 0.01 = 1 point; a lower-is-better metric may rise by this much)
    max_metric_drop: float = knob(0.01, at_least=0.0)
    calibration_samples: int = knob(256, at_least=1)  # onnx_int8: seeded train images
    # a task whose model takes any input width (ocr): widths (px, ascending, at most the
    # trained width) predict and serve run each input at (the smallest that holds it, else the
    # largest), parity checked at each; [] = the trained width only
    width_buckets: list[int] = knob([])
    # detection: the parity gate matches detections at or above this score, and the ONNX
    # metadata carries it as the decoding's threshold (predict's and serve's default);
    # null = evaluate.score_threshold
    score_threshold: float | None = None

    def problems(self) -> list[str]:
        if self.score_threshold is not None and not 0.0 <= self.score_threshold <= 1.0:
            return [f"`export.score_threshold` must be between 0 and 1 (or null: "
                    f"evaluate.score_threshold), got {self.score_threshold!r}"]

        unknown = [f for f in self.formats if f not in EXPORT_FORMATS]
        if unknown:
            return [f"export.formats: unknown format(s) {', '.join(unknown)}; choose from "
                    f"{', '.join(EXPORT_FORMATS)}"]
        if len(set(self.formats)) != len(self.formats):
            return [f"export.formats lists a format twice: {self.formats}"]
        if any(w < 1 for w in self.width_buckets) or self.width_buckets != sorted(
                set(self.width_buckets)):
            return [f"export.width_buckets must be positive widths in ascending order, each "
                    f"once: {self.width_buckets}"]
        return []


SECTIONS = {
    "data": Data,
    "sample": Sample,
    "ingest": Ingest,
    "validate": Validate,
    "split": Split,
    "prepare": Prepare,
    "train": Train,
    "evaluate": Evaluate,
    "export": Export,
}

# prepare's keys that say where the work runs, never what it makes (the same bytes whatever
# they are, tested): no stage lists them in dvc.yaml and no out hashes them (export's
# provenance, the report), so a run through Ray and a local run write the same dvc.lock.
PREPARE_PLACEMENT = ("workers", "engine", "ray_address", "ray_inputs")
# (an image project's: stages/lib/door.py swaps in another modality's keys)
PREPARE_RESULT = tuple(f"prepare.{f.name}" for f in dataclasses.fields(Prepare)
                       if f.name not in PREPARE_PLACEMENT and "modality" not in f.metadata)


# {section.key: modality} of the keys only one modality's tasks read (knob(modality=...))
MODALITY_KEYS = {f"{section}.{f.name}": f.metadata["modality"]
                 for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
                 if "modality" in f.metadata}


def unset_modality_key(section: str, key: str, value) -> bool:
    """A modality key (MODALITY_KEYS) at its default: hashed as before it existed."""
    if f"{section}.{key}" not in MODALITY_KEYS:
        return False
    return value == getattr(SECTIONS[section](), key)


def without_placement(section: str, values: dict) -> dict:
    """A section's values (a dict) less prepare's placement keys (PREPARE_PLACEMENT) and the
    modality keys at their defaults (unset_modality_key)."""
    return {k: v for k, v in values.items()
            if not (section == "prepare" and k in PREPARE_PLACEMENT)
            and not unset_modality_key(section, k, v)}


def _coerce(key: str, value, ftype, path):
    def bad(expected):
        return StageError(
            f"{path}: `{key}` must be {expected}, got {value!r} ({type(value).__name__}). "
            f"Fix its value in {path}."
        )

    origin = typing.get_origin(ftype)
    if origin in (list, tuple):
        (item_type,) = set(typing.get_args(ftype)) - {Ellipsis}
        if not isinstance(value, list):
            raise bad(f"a list of {item_type.__name__}")
        return [_coerce(f"{key}[{i}]", v, item_type, path) for i, v in enumerate(value)]
    if isinstance(ftype, types.UnionType) or origin is typing.Union:
        if value is None and type(None) in typing.get_args(ftype):
            return None
        options = [t for t in typing.get_args(ftype) if t is not type(None)]
        lists = [t for t in options if typing.get_origin(t) in (list, tuple)]
        if isinstance(value, list) and lists:  # a list is checked item by item, naming one
            return _coerce(key, value, lists[0], path)
        for option in options[:-1]:  # the first type the value fits (int | str: 16 or "auto")
            try:
                return _coerce(key, value, option, path)
            except StageError:
                pass
        ftype = options[-1]
    if ftype is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if ftype is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if ftype in (str, bool) and isinstance(value, ftype):
        return value
    if ftype is dict and isinstance(value, dict):
        return dict(value)
    raise bad(f"of type {ftype.__name__}")


def _allowed(key: str, value, meta: dict) -> str:
    """Why value breaks the field's declared choices or bounds; "" when it does not."""
    if "choices" in meta and value not in meta["choices"]:
        return f"`{key}` must be one of {', '.join(map(str, meta['choices']))}, got {value!r}"
    bounds = (("at_least", lambda v, b: v >= b, ">="), ("above", lambda v, b: v > b, ">"),
              ("at_most", lambda v, b: v <= b, "<="), ("below", lambda v, b: v < b, "<"))
    for name, ok, sign in bounds:
        if name in meta and not ok(value, meta[name]):
            return f"`{key}` must be {sign} {meta[name]}, got {value!r}"
    return ""


def read(path=PARAMS_FILE) -> dict:
    """The raw params file as a dict; a missing file is an error saying where to run."""
    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run the stage from the project root (where "
                         f"params.yaml and dvc.yaml are), as `dvc repro` does.")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise StageError(f"{path}: expected a mapping of sections.")
    return raw


def task_name(path=PARAMS_FILE) -> str:
    """The `task` key: a task under stages/tasks/ (classification when absent)."""
    return task_of(read(path), path)


def task_of(raw: dict, path) -> str:
    """The `task` key of a params file already read."""
    name = raw.get("task", DEFAULT_TASK)
    if not isinstance(name, str) or not name.isidentifier():
        raise StageError(f"{path}: `task` must be a task name such as {DEFAULT_TASK}, "
                         f"got {name!r}.")
    return name


def parse(cls, section: str, values, path):
    """A section's dataclass from its raw mapping: names, types, choices, ranges, problems()."""
    values = values or {}
    if not isinstance(values, dict):
        raise StageError(f"{path}: `{section}` must be a mapping of keys to values.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in sorted(values):
        if key not in fields:
            raise StageError(
                f"{path}: unknown key `{section}.{key}`; known keys in `{section}`: "
                f"{', '.join(fields)}. Fix the spelling or remove it."
            )
    hints = typing.get_type_hints(cls)
    typed = {k: _coerce(f"{section}.{k}", v, hints[k], path) for k, v in values.items()}
    obj = cls(**typed)
    for name, field in fields.items():
        why = _allowed(f"{section}.{name}", getattr(obj, name), field.metadata)
        if why:
            raise StageError(f"{path}: {why}. Fix it in {path}.")
    problems = obj.problems() if hasattr(obj, "problems") else []
    if problems:
        raise StageError(f"{path}: " + "; ".join(problems) + f". Fix it in {path}.")
    return obj


def load_all(path=PARAMS_FILE) -> dict:
    """{section: typed params} of every section, from one read of the file; unknown sections
    or keys are errors naming them."""
    return parse_all(read(path), path)


def parse_all(raw: dict, path) -> dict:
    """load_all of a params file already read."""
    unknown = sorted(set(raw) - set(SECTIONS) - {"task"})
    if unknown:
        raise StageError(
            f"{path}: unknown section(s) {', '.join(unknown)}; known sections: task, "
            f"{', '.join(SECTIONS)}."
        )
    return {section: parse(cls, section, raw.get(section), path)
            for section, cls in SECTIONS.items()}


def defaults() -> dict:
    """Every section's typed params at their defaults (what a caller with no params file uses)."""
    return parse_all({}, "the default params")


def load(section: str, path=PARAMS_FILE):
    """Return the typed params of one section (every section is checked: a typo anywhere in
    the file stops every stage, not only the one that reads it)."""
    return load_all(path)[section]


def params_option(func):
    """The `--params` option every stage shares."""
    import click

    return click.option(
        "--params",
        "params_path",
        default=PARAMS_FILE,
        show_default=True,
        type=click.Path(dir_okay=False),
        help="The params file to read this stage's section from.",
    )(func)
