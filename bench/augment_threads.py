"""What augmenting at one thread costs: each task's augmentation (its recipe, at its sample's
input size) timed at one thread, as train runs it now in every process, against the trainer's
threads (train.threads, 2), as it ran in the trainer's process before (where it made other
pixels than in a DataLoader worker, and so other weights: docs/gpu.md#dataloader-workers).

The two take turns batch by batch on the same samples, ROUNDS times, in this one process; prints
each one's median ms per sample and the ratio (one thread / two). The cost to a train step is
that difference against the step's own time (logs/train.json's samples/s).

    python -m bench.augment_threads [--rounds 7] [--samples 32]
"""
import statistics
import time

import click


SIZES = {"classification": (1, 8, 8), "detection": (3, 224, 224),
         "segmentation": (3, 128, 128), "ocr": (1, 32, 192)}


def inputs(task: str, n: int):
    import torch

    g = torch.Generator().manual_seed(0)
    shape = SIZES[task]
    x = torch.randn(n, *shape, generator=g)
    if task == "detection":
        xy = torch.rand(n, 8, 2, generator=g) * (shape[-1] - 60)
        y = torch.cat([torch.zeros(n, 8, 1), xy, xy + 10 + 40 * torch.rand(n, 8, 2, generator=g)],
                      2)
    elif task == "segmentation":
        y = torch.randint(0, 3, (n, *shape[1:]), generator=g).to(torch.uint8)
    else:
        y = torch.zeros(n, 9, dtype=torch.long)
    return x, y


@click.command()
@click.option("--rounds", default=7, show_default=True, help="Turns of each way.")
@click.option("--samples", default=32, show_default=True, help="Samples per turn.")
def main(rounds, samples):
    import torch

    from stages.lib.train.augment import one_thread, sample_seed
    from stages.lib.params import Train
    from stages.tasks import get

    torch.set_num_threads(2)
    click.echo(f"{'task':<16}{'1 thread ms':>12}{'2 threads ms':>14}{'ratio':>8}")
    for name in SIZES:
        task = get(name)
        p = Train(**{k[6:]: v for k, v in task.recipe.items() if k.startswith("train.")})
        if name == "classification":  # its recipe augments nothing: the shared crop and flip
            p = Train(aug_crop_scale=0.8, aug_hflip=0.5)
        x, y = inputs(name, samples)
        times = {1: [], 2: []}

        def batch(task=task, x=x, y=y, p=p):
            return [task.augment(x[i], y[i], p, sample_seed(0, 1, i)) for i in range(samples)]

        for _ in range(rounds):
            for threads in (1, 2):
                tic = time.perf_counter()
                if threads == 1:
                    with one_thread():
                        batch()
                else:
                    batch()
                times[threads].append((time.perf_counter() - tic) * 1000 / samples)
        one, two = statistics.median(times[1]), statistics.median(times[2])
        click.echo(f"{name:<16}{one:>12.3f}{two:>14.3f}{one / two:>8.2f}")


if __name__ == "__main__":
    main()
