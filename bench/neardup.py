"""Near-duplicate search: multi-index hashing (stages.lib.data.groups.hash_pairs) against brute
force.

Synthetic 64-bit hashes: uniform random ones plus 10% near copies (1-3 bits flipped) and 1%
exact repeats, so there are pairs to find. Prints, per N, the seconds of the index and, up to
--brute-max, of brute force, their ratio, and whether the pairs are identical (they must be).
Target: 1,000,000 hashes in under 60 s on 2 cores; identical pairs at 50,000.

    python -m bench.neardup                 # 25,000, 50,000 and 1,000,000 at distance 4
    python -m bench.neardup --n 1000000 --distance 7
"""
import time

import click
import numpy as np

from stages.lib.data.groups import brute_pairs, hash_pairs, scheme


def synthetic(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    near = rng.choice(n, n // 10, replace=False)
    src = rng.integers(0, n, len(near))
    for _ in range(3):
        flip = rng.random(len(near)) < 0.7
        h[near[flip]] = h[src[flip]] ^ (np.uint64(1) << rng.integers(0, 64, flip.sum())
                                        .astype(np.uint64))
        src = near
    h[rng.integers(0, n, n // 100)] = h[rng.integers(0, n, n // 100)]
    return h


@click.command()
@click.option("--n", "sizes", multiple=True, type=int, default=(25_000, 50_000, 1_000_000))
@click.option("--distance", default=4, show_default=True)
@click.option("--brute-max", default=50_000, show_default=True,
              help="Largest N also run by brute force.")
def main(sizes, distance, brute_max):
    for n in sizes:
        h = synthetic(n)
        t = time.perf_counter()
        got = hash_pairs(h, distance)
        index_s = time.perf_counter() - t
        line = (f"n {n:>9,}  distance {distance}  scheme {scheme(len(np.unique(h)), distance)}  "
                f"pairs {len(got[0]):,}  index {index_s:.2f} s")
        if n <= brute_max:
            t = time.perf_counter()
            want = brute_pairs(h, distance)
            brute_s = time.perf_counter() - t
            same = all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
            line += f"  brute {brute_s:.2f} s  ratio {brute_s / index_s:.0f}x  identical {same}"
            if not same:
                raise SystemExit(line + "\nMISMATCH")
        click.echo(line)


if __name__ == "__main__":
    main()
