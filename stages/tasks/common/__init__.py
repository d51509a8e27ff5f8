"""Task families: code that several tasks share, so that no task package imports another.

- single-label (classification, audio): singlelabel/, one class per input: the task's base
  class, its loss, metrics, decoding and checks;
- CTC text (OCR, speech): ctc.py (loss, greedy and beam decoding, CER/WER) and ctctext.py
  (the charset, the encoder, the text checks, the export agreement);
- speech synthesis (the audio and speech samples): speech_synth.py.

No TASK here: stages.tasks.available() lists only the task packages.
"""
