"""Every validate check's name and kind, in one place: the shared checks here, the modality's in
its CHECKS (stages/lib/modality/), a task's own in its `checks`. validate, the quarantine,
metrics/validation_checks.json and the reports all read them from here, so a check's kind is
never decided twice."""
# a check's kind: blocking stops the run (or quarantines the file), warning is reported,
# dataset is a finding over the whole usable set (class balance...)
BLOCKING, WARNING, DATASET = "blocking", "warning", "dataset"

# The checks of every modality's files: what ingest finds before (empty) or instead of (the
# rest) a decode, and what the same bytes under two annotations are. The modality adds its own
# (Task.modality.CHECKS: decode, size, mode...): shared() puts each in its place.
READ = {"empty": (BLOCKING, "a file of 0 bytes")}
FILES = {
    "symlink": (BLOCKING, "a symlink escaping the source, broken, in a loop, or a symlinked "
                          "folder"),
    "not_regular": (BLOCKING, "a FIFO, socket or device under the source: never opened"),
    "unreadable": (BLOCKING, "a file or folder that cannot be read (no permission, I/O error)"),
    "label_conflict": (BLOCKING, "the same bytes annotated differently: every copy"),
    "duplicate": (WARNING, "the same bytes, the same annotation: kept in one split"),
}
OTHER = "error"  # a manifest error of a kind no check knows: blocking
OTHER_CHECK = (BLOCKING, "any other error in the manifest")


def shared(modality) -> dict:
    """{check: (kind, description)} of the checks every task of this modality has, in the
    order the report, the quarantine list and the messages give them: empty, the modality's
    blocking checks, the files' others, the modality's warnings."""
    own = modality.CHECKS
    return {**READ, **{k: v for k, v in own.items() if v[0] == BLOCKING}, **FILES,
            **{k: v for k, v in own.items() if v[0] != BLOCKING}}


def ingest_errors(modality) -> tuple:
    """The error kinds ingest itself writes: its own and the modality's inspect's (a task
    adds its `annotation_errors`)."""
    return ("empty", *modality.INSPECT_ERRORS, "symlink", "not_regular", "unreadable")


def all_checks(task) -> dict:
    """{check: (kind, description)}: shared, then the task's, then the catch-all."""
    return {**shared(task.modality), **task.checks, OTHER: OTHER_CHECK}


def names(task, kind: str) -> list[str]:
    """The checks of one kind (blocking, warning, dataset), in all_checks' order."""
    return [name for name, (k, _) in all_checks(task).items() if k == kind]


def blocking(task) -> list[str]:
    return names(task, BLOCKING)


def warnings(task) -> list[str]:
    return names(task, WARNING)


def dataset(task) -> list[str]:
    return names(task, DATASET)


def offenders(df, suite, key: str) -> dict[str, list]:
    """{check: sorted values of `key` in the rows failing it}, via one great_expectations run
    of suite [(check, expectation)] over the frame df (validate's checks and a task's own)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")  # no gx/ folder, no network
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (ctx.data_sources.add_pandas("gate").add_dataframe_asset("rows")
             .add_batch_definition_whole_dataframe("all")
             .get_batch(batch_parameters={"dataframe": df}))
    gx_suite = gx.ExpectationSuite(name="gate")
    for check, expectation in suite:
        expectation.meta = {"check": check}
        gx_suite.add_expectation(expectation)
    result = batch.validate(gx_suite, result_format={
        "result_format": "COMPLETE", "unexpected_index_column_names": [key]})
    found = {check: [] for check, _ in suite}
    for r in result.results:  # not in suite order
        found[r.expectation_config.meta["check"]] = sorted(
            {row[key] for row in r.result.get("unexpected_index_list") or []})
    return found
