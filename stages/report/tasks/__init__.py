"""Each task's part of the run report, one module a task, named after it: `headline(facts)`,
[(label, value)] for the page's header, and `sections(facts)`, [(id, title, html)] placed
between the generic sections (stages/report/page.py). A task without a module here gets neither.

These modules stand on the report's floor (they import stages.report and stages.lib only) and
never import another task's module: what two tasks' reports share is a module of its own here
(singlelabel: the evaluation tables; sound: the audio players). Keeping them out of
stages/tasks/ keeps them out of the train stage's code: an edit to a report section reruns only
the report.
"""
