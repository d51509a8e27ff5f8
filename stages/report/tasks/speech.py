"""The speech task's part of the run report: CER and WER (greedy and beam), CER by clip
duration and by transcript length, CER per speaker, and the worst clips with their
spectrograms and a player each (an inline, base64 `<audio>` element, the bytes ingest hashed:
stages/report/tasks/sound.py)."""
from stages.report.facts import eval_file
from stages.report.html import esc, num, table
from stages.report.tasks.sound import manifest_hashes, player, source_of
from stages.report.tasks.transcripts import lead, worst_sheet

ROWS = 20
PLAYERS = 8
LOWER = ("cer", "wer", "cer_beam", "wer_beam")


def headline(facts) -> list:
    return [("test CER", facts.eval.get("cer")), ("test WER", facts.eval.get("wer"))]


def sections(facts) -> list[tuple[str, str, str]]:
    return [("evaluation", "Evaluation", evaluation(facts))]


def evaluation(facts) -> str:
    by_duration = eval_file(facts, "cer_by_duration.csv")
    duration_rows = [f"<tr><td>{esc(r['seconds'])}</td>"
                     f"{num('cer_by_duration.' + r['seconds'], float(r['cer']))}"
                     f"<td>{esc(r['clips'])}</td></tr>" for r in by_duration]
    by_length = eval_file(facts, "cer_by_length.csv")
    length_rows = [f"<tr><td>{esc(r['length'])}</td>"
                   f"{num('cer_by_length.' + r['length'], float(r['cer']))}"
                   f"<td>{esc(r['clips'])}</td></tr>" for r in by_length]
    speakers = eval_file(facts, "per_speaker.csv")
    speaker_rows = [f"<tr><td>{esc(r['speaker'])}</td><td>{esc(r['clips'])}</td>"
                    f"{num('per_speaker.' + r['speaker'] + '.cer', float(r['cer']))}"
                    f"{num('per_speaker.' + r['speaker'] + '.wer', float(r['wer']))}</tr>"
                    for r in speakers]
    bad = eval_file(facts, "bad_cases.csv")
    hashes = manifest_hashes({r["path"] for r in bad[:PLAYERS]})
    source = source_of(facts)
    bad_rows = [f"<tr><td><code>{esc(r['path'])}</code></td><td>{esc(r['truth'])}</td>"
                f"<td>{esc(r['predicted'])}</td><td>{esc(r['cer'])}</td>"
                f"<td>{esc(r['seconds'])}</td><td>"
                + (player(source, r["path"], hashes.get(r["path"], "")) if i < PLAYERS else "")
                + "</td></tr>" for i, r in enumerate(bad[:ROWS])]
    sheet = worst_sheet(facts, "worst test clips: spectrogram, truth, prediction", "clip")
    return lead(facts, "clips", len(bad), LOWER.__contains__) + f"""
<div class="grid2">
<div><h3>CER by clip duration <span class="muted small">(bins of 0.5 s, from)</span></h3>
{table(["seconds", "CER", "clips"], duration_rows, "numeric")}</div>
<div><h3>CER by transcript length <span class="muted small">(characters)</span></h3>
{table(["length", "CER", "clips"], length_rows, "numeric")}</div>
</div>
<h3>CER per speaker <span class="muted small">(the group: a voice, for the sample)</span></h3>
{table(["speaker", "clips", "CER", "WER"], speaker_rows, "narrow")}
<h3>Worst clips <span class="muted small">(highest CER first; spectrogram, truth and
prediction; a player for the first {PLAYERS})</span></h3>
{sheet}
{table(["path", "truth", "predicted", "CER", "seconds", "clip"], bad_rows, "narrow")}"""
