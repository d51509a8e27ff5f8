"""Near-duplicate search: multi-index hashing equals brute force exactly; groups do not chain."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.lib.data.groups import _blocks, brute_pairs, hash_pairs, scheme

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


def reference(hashes, d):
    """The definition, in plain Python: every i < j within d bits."""
    out = [(i, j, bin(a ^ b).count("1")) for i, a in enumerate(hashes)
           for j, b in enumerate(hashes) if i < j and bin(a ^ b).count("1") <= d]
    return tuple(np.array([p[k] for p in out], dtype=np.int64) for k in range(3))


@settings(max_examples=150, deadline=None)
@given(st.lists(U64, max_size=60), st.integers(0, 12))
def test_random_hashes_give_the_brute_force_pairs(hashes, d):
    h = np.array(hashes, dtype=np.uint64)
    want = reference(hashes, d)
    assert same(brute_pairs(h, d), want)
    assert same(hash_pairs(h, d), want)


@settings(max_examples=300, deadline=None)
@given(adversarial(), st.integers(0, 9), st.integers(0, 4))
def test_adversarial_hashes_give_the_brute_force_pairs_under_every_scheme(hashes, d, extra):
    h = np.array(hashes, dtype=np.uint64)
    want = reference(hashes, d)
    assert same(brute_pairs(h, d), want)
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


def test_representatives_do_not_chain():
    import hashlib

    from stages.lib.data.groups import group_keys, near_clusters

    h, rows = 0x0F0F0F0F0F0F0F0F, []
    for i in range(40):  # a chain: each hash one bit from the one before, 40 bits end to end
        h ^= 1 << i
        rows.append({"path": f"x/{i:02d}.png", "sha256": hashlib.sha256(bytes([i])).hexdigest(),
                     "phash": f"{h:016x}", "width": "32", "height": "32", "error": ""})
    bits = {r["sha256"]: int(r["phash"], 16) for r in rows}
    rep = near_clusters(rows, 3)
    reps = set(rep.values())
    assert all(bin(bits[s] ^ bits[r]).count("1") <= 3 for s, r in rep.items())
    assert all(bin(bits[a] ^ bits[b]).count("1") > 3 for a in reps for b in reps if a != b)
    assert 40 / 7 <= len(reps) < 40  # groups of at most 7 (diameter 6 bits), not one chain
    assert near_clusters(list(reversed(rows)), 3) == rep  # the listing order does not matter
    assert len(set(group_keys(rows, 3, chain=True).values())) == 1  # the old rule: one group
    keys = group_keys(rows, 3)
    assert len(set(keys.values())) == len(reps)
    rows[0]["group"] = rows[-1]["group"] = "same-shoot"  # an explicit group stays a hard group
    assert group_keys(rows, 3)["x/00.png"] == group_keys(rows, 3)["x/39.png"]
