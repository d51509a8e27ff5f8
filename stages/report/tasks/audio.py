"""The audio task's part of the run report: the single-label evaluation section (headline,
per-class scores, confusion matrix, the bad cases' sheet, here spectrograms), plus a player
(stages/report/tasks/sound.py) for each of the worst cases."""
from stages.report.facts import eval_file
from stages.report.html import esc
from stages.report.tasks.singlelabel import evaluation
from stages.report.tasks.sound import manifest_hashes, player, source_of

PLAYERS = 8  # worst cases with a player


def headline(facts) -> list:
    return [("test top-1", facts.eval.get("accuracy")),
            ("balanced accuracy", facts.eval.get("balanced_accuracy"))]


def sections(facts) -> list:
    return [("evaluation", "Evaluation", evaluation(facts) + players(facts))]


def players(facts) -> str:
    rows = eval_file(facts, "bad_cases.csv")[:PLAYERS]
    if not rows:
        return ""
    hashes = manifest_hashes({r["path"] for r in rows})
    source = source_of(facts)
    items = "".join(
        f"<tr><td><code>{esc(r['path'])}</code></td><td>{esc(r['true'])}</td>"
        f"<td>{esc(r['predicted'])}</td><td>{esc(r['confidence'])}</td>"
        f"<td>{player(source, r['path'], hashes.get(r['path'], ''))}</td></tr>"
        for r in rows)
    return (f"<h3>Listen to the worst cases <span class=\"muted small\">(the {len(rows)} most "
            f"confident mistakes)</span></h3>\n<table class=\"narrow\"><thead><tr><th>path</th>"
            f"<th>actual</th><th>predicted</th><th>confidence</th><th>clip</th></tr></thead>"
            f"<tbody>{items}</tbody></table>")
