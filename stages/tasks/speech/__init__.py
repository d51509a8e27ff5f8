"""Speech to text: clips with transcripts in (a path<TAB>transcript list, LibriSpeech's
*.trans.txt, Common Voice's TSVs), read as log-mel spectrograms by the audio modality
(stages/lib/modality/audio.py), a small CNN + BiGRU trained with CTC, CER and WER on the fixed
test split (greedy and beam), text out. The CTC decoding, loss and text metrics are the ones
OCR uses (stages/tasks/common/ctc.py)."""
from stages.lib.modality.audiogate import RATE_CHECK
from stages.lib.modality.audioroom import RECIPE as ROOM_RECIPE
from stages.tasks.common.ctctext import CtcText
from stages.tasks.speech import annotations, checks

# validate's and train's audio keys the speech task reads (the audio modality's gate and
# SpecAugment), and its own sample size
TASK_KEYS = ("prepare.audio", "sample.clips", "validate.charset", "validate.min_seconds",
             "validate.max_seconds", "validate.silence_db", "validate.max_clipped",
             "train.aug_time_mask", "train.aug_freq_mask", "train.aug_masks",
             "train.aug_freq_shift",
              # the room and the microphone (stages/lib/modality/audioroom.py)
              "train.aug_speed", "train.aug_pitch", "train.aug_reverb", "train.aug_noise",
              "train.aug_noise_snr_min", "train.aug_noise_snr_max", "train.aug_gain",
              "train.aug_bandlimit", "train.aug_telephone")
MAX_FIT_SECONDS = 30.0  # init: frames cover the longest clip, up to this
SPEC = {"sample_rate": 16000, "n_fft": 512, "hop": 160, "n_mels": 40}


class Speech(CtcText):
    name = "speech"
    modality_name = "audio"
    checks = {**checks.CHECKS, **RATE_CHECK}
    item = "clip"
    secondary_metrics = ("wer", "clip_accuracy")
    recipe = {
        # 30 epochs under a decay of 0.1: over two training seeds and 800 clips of CMU Flite
        # (a synthesizer never trained on), CER 0.053 and AUROC 0.877 against 0.059 and 0.855
        # at 20 epochs and 1e-4 (docs/speech.md#the-speech-recipe-on-a-synthesizer-never-heard)
        "train.model": "cnn_bigru", "train.epochs": 30, "train.batch_size": 32,
        "train.lr": 0.003, "train.warmup_epochs": 1, "train.grad_clip": 5.0,
        "train.weight_decay": 0.1,
        "train.aug_time_mask": 12, "train.aug_freq_mask": 6, "train.aug_masks": 2,
        **ROOM_RECIPE,  # the room and the microphone (audioroom.py)
        "prepare.mean": "auto", "prepare.std": "auto",
        "validate.min_seconds": 0.1, "validate.silence_db": -60.0,
        "validate.max_clipped": 0.01,
        # off: the log-mel hash reads the clip's middle second (the modality's fixed HASH_SPEC),
        # which says little of a longer utterance's words: on the sample, different digit
        # strings of different voices came within 4 bits of each other
        "validate.near_dup_distance": -1,
    }
    layouts = ("transcripts.txt (path<TAB>transcript[<TAB>speaker] per line), Common Voice's "
               "train/dev/test.tsv (or validated.tsv) with clips/, or LibriSpeech's "
               "*.trans.txt beside ID.flac; WAV, FLAC or OGG")
    revisit = (
        ("validate.charset", "\"\" accepts any character: list yours, so a stray one stops "
                             "the gate"),
        ("prepare.audio", "frames sets the length every clip is padded to: the longest "
                               "clip sets it (validate.max_seconds refuses longer ones)"),
        ("train.epochs", "30 (with train.weight_decay 0.1) suits the 2,000 sample clips; "
                         "fewer clips need more epochs"),
    )
    models = ("cnn_bigru", "cnn_bigru_small", "cnn_bigru_large")  # model.py SIZES
    task_keys = TASK_KEYS
    # lexicon: the train split's words (a closed vocabulary) that decoding spells with
    # (lexicon.py); [] for an open vocabulary; absent from models made before it
    meta_keys = (*CtcText.meta_keys, "lexicon")
    optional_meta_keys = ("lexicon",)

    def prepare_meta(self, splits):
        from stages.tasks.speech.lexicon import words_of

        return {**super().prepare_meta(splits), "lexicon": words_of(splits["train"])}

    def decode(self, outputs, meta, k, views=()):
        """With a lexicon (meta["lexicon"], the train split's words), a prefix beam search
        within it of width meta["beam"] (--beam; lexicon.WIDTH when not given), its confidence
        read from the test-time views' outputs too (self.views); without one, as OCR decodes
        (greedy, or --beam's free search). uncertain: the confidence is below
        meta["min_confidence"]."""
        if not meta.get("lexicon"):
            return super().decode(outputs, meta, k)
        from stages.tasks.speech.lexicon import WIDTH, decode

        floor = meta.get("min_confidence") or 0.0
        return [{"text": t, "confidence": c, "uncertain": c < floor}
                for t, c in decode(outputs, meta["charset"], meta["lexicon"],
                                   meta.get("beam") or WIDTH, views)]

    def views(self, meta):
        """A model with a lexicon: the four test-time views of views.py, whose agreement its
        confidence reads; without one: none."""
        if not meta.get("lexicon"):
            return []
        from stages.tasks.speech.views import transforms

        return transforms()

    @property
    def sample_params(self):
        from stages.tasks.speech.sample import CHARSET, CLIPS, FRAMES, MAX_SECONDS

        return {"sample.clips": CLIPS, "split.by": "given", **self.recipe,
                "validate.max_seconds": MAX_SECONDS, "validate.charset": CHARSET,
                "prepare.audio": {**SPEC, "frames": FRAMES}}

    def check_settings(self, params):
        """The CTC length rule's geometry from prepare.audio: (sample rate, hop, seconds the
        frames hold)."""
        from stages.lib.modality.audiospec import AudioSpec

        spec = AudioSpec.of(params["prepare"].audio)
        return {"geometry": (spec.sample_rate, spec.hop, spec.seconds)}

    def layout(self, found):
        return {"list": f"{annotations.LIST} list (path<TAB>transcript)",
                "common_voice": "Common Voice TSVs",
                "librispeech": "LibriSpeech *.trans.txt"}.get(
            annotations.layout_of(set(found.skip) | set(found.values)), self.layouts)

    def data_summary(self, rows):
        speakers = {r.get("group") for r in rows if r.get("group")}
        return f"{super().data_summary(rows)}, {len(speakers)} speakers"

    def fit_prepare(self, clips):
        """The log-mel spec for one's own data: frames holding the longest clip of every
        split (from the headers of every clip: (split, frames, rate, grey)), capped at
        MAX_FIT_SECONDS; CTC must see the whole clip, so validate.max_seconds refuses longer
        ones instead of cropping them, and the gate checks the val and test clips too."""
        import math

        seconds = max((f / r for _, f, r, _ in clips if r), default=1.0)
        seconds = min(MAX_FIT_SECONDS, math.ceil(seconds * 10) / 10)
        spec = {**SPEC, "frames": 1 + round(seconds * SPEC["sample_rate"] / SPEC["hop"])}
        return [("prepare.audio", spec,
                 f"log-mel at {spec['sample_rate']} Hz; frames hold the longest clip "
                 f"({seconds:g} s, at most {MAX_FIT_SECONDS:g})"),
                ("validate.max_seconds", seconds, "a longer clip would be cropped, its words "
                                                  "lost to CTC: the gate refuses it"),
                ("prepare.channels", 1, "a spectrogram: every clip mixed to mono"),
                ("prepare.mean", "auto", "the prepared train split's"),
                ("prepare.std", "auto", "the prepared train split's")]

    def sample(self, p):
        from stages.tasks.speech.sample import CLIPS, clips

        return clips(p.clips or CLIPS)

    def read_annotations(self, source, listing, settings):
        return annotations.read_annotations(source, listing)

    def subset_annotations(self, source, dest, found, chosen):
        annotations.write_subset(source, dest, found, chosen)

    def check_columns(self, rows, ok, p, settings):
        from stages.lib.modality.audiogate import rate_columns

        geometry = settings["geometry"]
        columns, counts = rate_columns(rows, ok, geometry[0])
        return {**checks.check_columns(rows, ok, p, geometry), **columns}, counts

    def file_expectations(self, p):
        from stages.lib.modality.audiogate import rate_expectations

        return checks.file_expectations(p) + rate_expectations()

    def reason(self, check, row, p, findings, settings):
        if check == "sample_rate":
            from stages.lib.modality.audiogate import rate_reason

            return rate_reason(row, settings["geometry"][0], findings)
        return checks.reason(check, row, p, settings["geometry"])

    def build_model(self, name, meta):
        from stages.lib.modality.audiospec import AudioSpec
        from stages.tasks.speech.model import build_model

        return build_model(name, 1 + len(meta["charset"]), AudioSpec.from_meta(meta).n_mels)

    def lora_targets(self, model):
        return ["features.*", "proj.*"]  # the convolutions (the GRU is never adapted)

    def evaluate(self, outputs, targets, paths, inputs, meta, p, views=()):
        from stages.tasks.speech.metrics import evaluate

        return evaluate(outputs, paths, inputs, meta, p, self.modality.thumbnail, views)


TASK = Speech()
