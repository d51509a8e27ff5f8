"""The train stage's loop and a bare loop, timed step by step on the same batches.

`paired_fit` runs the stage's own `fit()` and, before each batch it draws, one step of the
caller's bare loop on the same samples: the machine's drifting speed hits both alike. Shared
by bench/train.py, bench/segment.py, bench/ocr.py, bench/detect.py and
bench/audio_baseline.py, with bare_steps for the bare loop.
"""
import time


def paired_fit(p, run, data, bare_step) -> list[list[tuple[float, float, int]]]:
    """Per epoch, [(stage seconds, bare seconds, samples)] of every step; bare_step(idx) runs one
    bare step on the samples idx and returns its seconds."""
    from stages.lib.train import augment
    from stages.lib.train.loop import fit

    steps = []
    real_batches = augment.batches

    def paired(ds, start, num_workers):
        epoch = []
        steps.append(epoch)
        it = real_batches(ds, start, num_workers)
        while True:
            tic = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            fetch = time.perf_counter() - tic
            bare = bare_step(item[0])
            tic = time.perf_counter()
            yield item
            epoch.append((fetch + time.perf_counter() - tic, bare, len(item[0])))

    augment.batches = paired
    try:
        fit(p, run, data)
    finally:
        augment.batches = real_batches
    return steps


def bare_steps(opt, loss_of):
    """paired_fit's bare_step for a plain loop: bare_step(idx) takes loss_of(idx), the loss of
    the samples idx, through one optimizer step and returns its seconds."""
    def bare_step(idx) -> float:
        tic = time.perf_counter()
        loss = loss_of(idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - tic

    return bare_step


def rates(epochs) -> tuple[float, float]:
    """(stage samples/s, bare samples/s) over the given epochs' steps."""
    timed = [s for epoch in epochs for s in epoch]
    n = sum(k for *_, k in timed)
    return n / sum(s for s, _, _ in timed), n / sum(b for _, b, _ in timed)
