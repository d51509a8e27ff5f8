"""Task families: code that several tasks share, so that no task package imports another.

- single-label (classification, audio): singlelabel/, one class per input: the task's base
  class, its loss, metrics, decoding and checks;
- CTC text (OCR, speech): ctc.py (loss, greedy and beam decoding, CER/WER) and ctctext.py
  (the charset, the encoder, the text checks, the export agreement);
- speech synthesis (the audio and speech samples, tools.synth_speech): speech_synth.py
  (espeak-ng), festival_synth.py (Festival), synth_render.py (a clip's plan, either one).

No TASK here: stages.tasks.available() lists only the task packages.
"""
