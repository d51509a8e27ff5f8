"""Audio classification: one label per clip (spoken keywords, sounds), read as a log-mel
spectrogram by the audio modality (stages/lib/modality/audio.py), a small CNN, and the
single-label family's loss, metrics and outputs (stages/tasks/common/singlelabel/), its bad
cases drawn as spectrograms."""
from stages.lib.modality.audiogate import RATE_CHECK
from stages.lib.modality.audioroom import RECIPE as ROOM_RECIPE
from stages.tasks.audio import annotations
from stages.tasks.common.singlelabel import SingleLabel

AUDIO_KEYS = ("prepare.audio", "validate.min_seconds", "validate.max_seconds",
              "validate.silence_db", "validate.max_clipped", "train.aug_time_mask",
              "train.aug_freq_mask", "train.aug_masks", "train.aug_freq_shift",
              # the room and the microphone (stages/lib/modality/audioroom.py)
              "train.aug_speed", "train.aug_pitch", "train.aug_reverb", "train.aug_noise",
              "train.aug_noise_snr_min", "train.aug_noise_snr_max", "train.aug_gain",
              "train.aug_bandlimit", "train.aug_telephone")


# the keyword task's mel bands (the speech task keeps audiospec's 40): with the recipe's decay,
# 24 bands read 400 Flite clips at top-1 0.905 where 40 read 0.858 (docs/speech.md)
MELS = 24


class Audio(SingleLabel):
    name = "audio"
    modality_name = "audio"
    checks = {**SingleLabel.checks, **RATE_CHECK}
    items = "clips"  # evaluate's words and its spectrogram sheet
    accuracy_word = "top-1"
    sheet_cell = (2.8, 1.9)
    layouts = ("a folder per class <source>/<class>/<clip>.wav (Speech Commands, with its "
               "validation_list.txt and testing_list.txt), or <source>/labels.tsv with "
               "path<TAB>label lines; WAV, FLAC or OGG")
    # what a project on one's own data starts from (tools.init), and the built-in sample too
    recipe = {
        # 48 epochs under a strong decay: on 400 clips of CMU Flite (a synthesizer never
        # trained on) the sample's model went from top-1 0.70 (16 epochs, decay 1e-4, 40
        # bands) to 0.91-0.92 (docs/speech.md#keywords-of-another-synthesizer)
        "train.model": "audio_cnn", "train.epochs": 48, "train.batch_size": 32,
        "train.lr": 0.003, "train.warmup_epochs": 1, "train.label_smoothing": 0.05,
        "train.weight_decay": 0.5,
        # SpecAugment off: on the sample (12 frames, 6 bands, shift 2) it cost test top-1
        # 0.984 -> 0.938 and Festival's clips 0.104 -> 0.075 (docs/speech.md)
        "train.aug_time_mask": 0, "train.aug_freq_mask": 0, "train.aug_masks": 2,
        "train.aug_freq_shift": 0,
        **ROOM_RECIPE,  # the room and the microphone (audioroom.py)
        "prepare.mean": "auto", "prepare.std": "auto",
        "validate.min_seconds": 0.1, "validate.max_seconds": 30.0,
        "validate.silence_db": -60.0, "validate.max_clipped": 0.01,
        # -1: the 64-bit log-mel hash says too little of short speech: on the sample, 143
        # pairs of different clips share the exact hash, 25 of them different words, and at 2
        # bits union-find chained 685 of the 1,600 clips and emptied the train split
        # (docs/speech.md); a re-encoded or louder copy is still caught when it is set
        "validate.near_dup_distance": -1,
    }
    # split.by given: the sample's own lists (HELD_OUT in stages/tasks/audio/sample.py)
    sample_params = {"sample.per_class": 0, "split.by": "given", **recipe, "prepare.audio": {
        "sample_rate": 16000, "n_fft": 512, "hop": 160, "n_mels": MELS, "frames": 101}}
    revisit = (
        ("prepare.audio", "the log-mel front end: frames sets the clip length every "
                               "clip is padded or cropped to (frames - 1) x hop samples"),
        ("train.epochs", "48 (with train.weight_decay 0.5) suits the 2,080 sample clips (83 "
                         "voices); fewer clips need more epochs"),
        ("validate.max_seconds", "clips longer than this are refused: a keyword set's clips "
                                 "are about 1 s"),
        ("validate.classes", "[] accepts any folder as a class: list yours"),
    )
    models = ("audio_cnn",)
    task_keys = (*SingleLabel.task_keys, *AUDIO_KEYS)

    def views(self, meta):
        """Test-time views (views.py): the clip played 0.8x, 0.9x, 1.1x and 1.2x as fast."""
        from stages.lib.modality.audioviews import transforms
        from stages.tasks.audio.views import VIEWS

        return transforms(VIEWS)

    def decode(self, outputs, meta, k, views=()):
        """The single-label answer of the mean probability over the clip and its views."""
        from stages.tasks.audio.views import averaged

        return super().decode(averaged(outputs, views), meta, k)

    def evaluate(self, outputs, targets, paths, clips, meta, p, views=()):
        """The single-label metrics of the answer decode gives (the views averaged in)."""
        from stages.tasks.audio.views import averaged

        return super().evaluate(averaged(outputs, views), targets, paths, clips, meta, p)

    def check_settings(self, params):
        """The rate every clip must have: prepare's feature rate (validate's sample_rate)."""
        from stages.lib.modality.audiospec import AudioSpec

        return {"rate": AudioSpec.of(params["prepare"].audio).sample_rate}

    def fit_prepare(self, clips):
        """The log-mel spec for one's own data (audiospec.fit: the feature defaults, frames
        covering 90% of the train clips, from the headers: (split, frames, rate, mono)),
        mean/std auto."""
        from stages.lib.modality.audiospec import PARAMS_KEY, fit

        settings, why = fit(clips)
        settings["n_mels"] = MELS
        why += f"; {MELS} mel bands (the keyword recipe's: a coarser envelope of the voice)"
        return [
            (PARAMS_KEY, settings, why),
            ("prepare.channels", 1, "a spectrogram: every clip mixed to mono"),
            ("prepare.mean", "auto", "the prepared train split's"),
            ("prepare.std", "auto", "the prepared train split's"),
        ]

    def sample(self, p):
        from stages.tasks.audio.sample import clips

        return clips(p.per_class)

    def read_annotations(self, source, listing, settings):
        return annotations.read_annotations(source, listing)

    def layout(self, found):
        return annotations.layout(found)

    def check_columns(self, rows, ok, p, settings):
        from stages.lib.modality.audiogate import rate_columns

        columns, counts = rate_columns(rows, ok, settings["rate"])
        return {**super().check_columns(rows, ok, p, settings)[0], **columns}, counts

    def file_expectations(self, p):
        from stages.lib.modality.audiogate import rate_expectations

        return super().file_expectations(p) + rate_expectations()

    def reason(self, check, row, p, findings, settings):
        if check == "sample_rate":
            from stages.lib.modality.audiogate import rate_reason

            return rate_reason(row, settings["rate"], findings)
        return super().reason(check, row, p, findings, settings)

    def build_model(self, name, meta):
        from stages.tasks.audio.model import build_model

        return build_model(name, len(meta["classes"]), meta["channels"])

    def subset_annotations(self, source, dest, found, chosen):
        annotations.write_subset_list(source, dest, found, chosen)


TASK = Audio()
