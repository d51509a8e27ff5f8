"""prepare's jobs: what its worker processes (engine local) and a Ray cluster's tasks
(engine ray, stages/prepare_ray.py) run, each on one job: a shard's rows, some rows of one, or
some rows' headers. A job carries its rows and the setup a worker builds itself from (the
task's encoder and modality, the prepare params; nothing is read from the params file, which a Ray
worker's machine may not have).

This module is never run as __main__ (stages/prepare.py is): its functions are pickled by
reference, `stages.prepare_jobs.write_shard`, and imported by name where they run (a forked
worker, a spawned one, a Ray worker), never looked up by a module name given as text.
"""
import functools
from pathlib import Path

OUT_DIR = Path("data/processed")

_WORKER = {}  # per process: the task's encoder, its modality and the prepare params (first job)


def init_worker(task_name, meta, source, size, channels, facts, norm, width_buckets=()):
    """Set this process up for write_shard or decode_rows (once per distinct setup: jobs carry
    it; nothing is read from the params file, which a Ray worker's machine may not have)."""
    from stages.tasks import get

    setup = (task_name, meta, source, size, channels, facts, norm, list(width_buckets))
    if _WORKER.get("setup") == setup:
        return
    _WORKER.clear()

    task = get(task_name)
    modality = task.modality
    _WORKER.update(encode=task.encoder({**meta, "source": source_path(source)}),
                   modality=modality,
                   dtype=task.target_dtype,
                   source=source_tree(source),
                   spec=modality.stored(size, channels, meta.get("letterbox") or False),
                   facts=facts, norm=norm, width_buckets=list(width_buckets),
                   sized=task.encoder_takes_size, setup=setup)


@functools.lru_cache(maxsize=4)
def source_tree(source):
    """data.source as the decode opens files under it (`tree / path`): a folder, or with
    prepare.ray_inputs: remote, a ("s3", url, endpoint, dir md5, path) tuple: the files on the DVC
    remote (stages/lib/data/dvcremote.py RemoteTree, fetched once per process)."""
    if isinstance(source, tuple):
        from stages.lib.data.dvcremote import RemoteTree

        return RemoteTree(*source[1:4])
    return Path(source)


def source_path(source) -> str:
    """data.source's path as text (of a remote tuple: the path it has here)."""
    return source[4] if isinstance(source, tuple) else str(source)


def source_arg(source):
    """data.source as the jobs carry it: a path's text, or the remote tuple (source_tree)."""
    return source if isinstance(source, tuple) else str(source)


def warm_up(modality_name: str):
    """A worker's imports, made as it starts (alongside the parent's reading of the tables):
    the modality's (numpy and Pillow for images) among them."""
    import numpy  # noqa: F401

    import stages.lib.data.autoprep  # noqa: F401
    import stages.lib.data.shards  # noqa: F401
    from stages.lib.modality import get

    get(modality_name)


def prepare_split(rows, source: Path, encode, dtype, spec, facts=None, sized=False,
                  header_sizes=None, out=None, done=None, *, modality):
    """(uint8 stored samples, targets) of some rows, each file decoded by the task's
    modality (its decode) as its input spec says (spec: the modality's Spec); encode(row,
    sample) gives a target (sized: encode(row, sample, size), the file's upright size before
    the resize, which a letterbox's geometry needs). facts: a list that gets each file's
    (shorter side, grey) from the header this decode opens (prepare's hints, without a second
    pass over the files); header_sizes: a list that gets each file's header size (OCR's
    width buckets). out: a uint8 array of at least len(rows) samples to decode into (every
    byte of its first len(rows) is written) instead of a new one: a worker reuses one for all
    its shards, as fresh pages cost 8-10% of the decode. done: called with i after the first
    i files are decoded (and encoded), each time."""
    import numpy as np

    shape = (len(rows), *modality.input_shape(spec))
    x = np.zeros(shape, dtype=np.uint8) if out is None else out[:len(rows)]
    if x.shape != shape or x.dtype != np.uint8:
        raise ValueError(f"out: {out.dtype} {out.shape}, not room for uint8 {shape}")
    y = []
    for i, r in enumerate(rows):
        x[i], size = modality.decode(source / r["path"], spec, facts, header_sizes)
        y.append(encode(r, x[i], size) if sized else encode(r, x[i]))
        if done is not None:
            done(i + 1)
    return x, np.array(y, dtype=dtype)


def write_shard(job) -> tuple:
    """Decode one shard's rows and write its files: (samples, the shorter sides of its
    images when it is a split whose sides count, how many are colour, the train pixels' value
    counts when mean/std are auto, [(temp file, file)]). Nothing but these small facts goes
    back to the parent, and the files' temp names: the parent fsyncs and renames them
    (io.commit) while this worker decodes its next shard, instead of this worker waiting on
    the disk."""
    from stages.lib.data.shards import ShardWriter

    setup, split, k, rows, sides_count = job
    init_worker(*setup)
    w = _WORKER
    facts = [] if w["facts"] else None
    sizes = [] if w["width_buckets"] else None
    shape = (len(rows), *w["modality"].input_shape(w["spec"]))
    if w.get("writer") is None:  # one for all this worker's shards (the first is the longest)
        w["writer"] = ShardWriter(OUT_DIR)
    writer = w["writer"]
    # the images file goes to the disk as the decode fills it (io.StreamedWrite)
    with writer.samples(split, k, shape) as images_file:
        x, y = prepare_split(rows, w["source"], w["encode"], w["dtype"], w["spec"], facts,
                             w["sized"], sizes, images_file.x, done=images_file.filled,
                             modality=w["modality"])
    widths = None
    if w["width_buckets"]:  # from the headers the decode opened, not a second open
        widths = w["modality"].line_buckets(sizes, w["spec"].size, w["width_buckets"])
    written = [*images_file.written, *writer.targets(split, k, y, widths)]
    return (len(rows), *decode_facts(split, x, facts, sides_count), written)


def decode_facts(split, x, facts, sides_count) -> tuple:
    """What a decode of some rows brings back for the hints and auto mean/std: (their shorter
    sides when sides_count, how many are colour, the train pixels' value counts when
    mean/std are auto, else None)."""
    counts = None
    if _WORKER["norm"] and split == "train":
        from stages.lib.data.autoprep import value_counts

        counts = value_counts(x)
    facts = facts or []
    return ([side for side, _ in facts] if sides_count else [],
            sum(not grey for _, grey in facts), counts)


def decode_rows(job) -> tuple:
    """engine ray's task (stages/prepare_ray.py): decode some rows of one shard, in a Ray
    worker, and bring back (uint8 images, targets, bucket widths or None, decode_facts) for
    the driver to write into the shard. The same decode as write_shard's, nothing written."""
    setup, split, rows, sides_count = job
    init_worker(*setup)
    w = _WORKER
    facts = [] if w["facts"] else None
    sizes = [] if w["width_buckets"] else None
    x, y = prepare_split(rows, w["source"], w["encode"], w["dtype"], w["spec"], facts,
                         w["sized"], sizes, modality=w["modality"])
    widths = (w["modality"].line_buckets(sizes, w["spec"].size, w["width_buckets"])
              if sizes is not None else None)
    return x, y, widths, decode_facts(split, x, facts, sides_count)


def header_job(job) -> tuple:
    """(shorter sides, colour count) of some rows' headers (image_size/channels auto), as the
    modality reads them (its header_facts)."""
    from stages.lib.modality import get

    source, rows, modality_name = job
    tree = source_tree(source)
    header_facts = get(modality_name).header_facts
    facts = [header_facts(tree / r["path"]) for r in rows]
    return [side for side, _ in facts], sum(not grey for _, grey in facts)
