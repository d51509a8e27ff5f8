"""The brightness test task's part of the run report (tests/tasks/brightness/): the test copies
it to stages/report/tasks/brightness.py, where stages/report/page.py finds it by the task's name.
"""


def headline(facts):
    return [("test MAE", facts.eval.get("mae"))]


def sections(facts):
    return [("brightness", "Brightness",
             f"<p>Test MAE <b data-key='eval.mae'>{facts.eval.get('mae', 0):.4f}</b></p>")]
