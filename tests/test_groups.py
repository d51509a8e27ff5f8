"""Near-duplicate search: multi-index hashing equals brute force exactly; groups do not chain."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.lib.groups import _blocks, brute_pairs, hash_pairs, scheme

U64 = st.integers(0, 2**64 - 1)


def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def flip(h, bits):
    for b in bits:
        h ^= 1 << b
    return h


@st.composite
def adversarial(draw):
    """Clusters of hashes a few bits apart, flips placed on block edges, exact repeats, and
    hashes that all share most blocks (one huge bucket): the cases where a wrong block split
    or a missed bucket would show."""
    base = draw(st.lists(U64, min_size=1, max_size=8))
    edges = sorted({e for m in range(1, 12) for e in (sum(64 // m + (b < 64 % m)
                                                         for b in range(i)) for i in range(m))})
    bit = st.one_of(st.integers(0, 63), st.sampled_from([e for e in edges if e < 64]),
                    st.sampled_from([max(e - 1, 0) for e in edges]))
    out = []
    for h in base:
        for _ in range(draw(st.integers(1, 12))):
            out.append(flip(h, draw(st.lists(bit, max_size=10))))
    return out + draw(st.lists(st.sampled_from(out), max_size=5))  # exact repeats


@settings(max_examples=150, deadline=None)
@given(st.lists(U64, max_size=60), st.integers(0, 12))
def test_random_hashes_give_the_brute_force_pairs(hashes, d):
    h = np.array(hashes, dtype=np.uint64)
    assert same(hash_pairs(h, d), brute_pairs(h, d))


@settings(max_examples=300, deadline=None)
@given(adversarial(), st.integers(0, 9), st.integers(0, 4))
def test_adversarial_hashes_give_the_brute_force_pairs_under_every_scheme(hashes, d, extra):
    h = np.array(hashes, dtype=np.uint64)
    want = brute_pairs(h, d)
    assert same(hash_pairs(h, d), want)
    m = min(d + 1 + extra, 64)  # any m > d with k = m - d is exact, not only the chosen one
    assert same(hash_pairs(h, d, force=(m, m - d)), want)


def test_blocks_cover_the_64_bits_once():
    for m in range(1, 65):
        masks = _blocks(m)
        assert sum(masks) == 2**64 - 1 and len(masks) == m
        assert all(a & b == 0 for i, a in enumerate(masks) for b in masks[i + 1:])


def test_many_hashes_use_an_index_and_agree_with_brute_force():
    rng = np.random.default_rng(3)
    h = rng.integers(0, 2**64 - 1, 20_000, dtype=np.uint64, endpoint=True)
    h[:2000] = h[2000:4000] ^ (np.uint64(1) << rng.integers(0, 64, 2000).astype(np.uint64))
    h[4000:4100] = h[4100:4200]
    for d in (0, 2, 4, 7):
        assert scheme(len(np.unique(h)), d) is not None  # not brute force in disguise
        got = hash_pairs(h, d)
        assert same(got, brute_pairs(h, d))
        assert len(got[0]) == 100 if d == 0 else len(got[0]) >= 2100
