"""The classification task's part of the run report: the single-label evaluation section
(headline metrics, per-class scores, confusion matrix, bad cases) and the header's headline
numbers.

`sections(facts)` returns (id, title, html) triples; the report puts them after its generic
sections on the data and training and before the export.
"""
from stages.report.facts import Facts
from stages.report.tasks.singlelabel import evaluation


def headline(facts: Facts) -> list[tuple[str, object]]:
    """(label, value) pairs for the page header; a None value is left out."""
    return [("test accuracy", facts.eval.get("accuracy")),
            ("macro F1", facts.eval.get("f1_macro"))]


def sections(facts: Facts) -> list[tuple[str, str, str]]:
    return [("evaluation", "Evaluation", evaluation(facts))]
