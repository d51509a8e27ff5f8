"""Which files must share a split: same content, near-duplicates and a shared `group` value.

validate reports near-duplicate pairs and split keeps each group together, both through this
module, so what the report names and what the split does cannot disagree. Near-duplicates are
files whose fingerprints (the task's modality's `fingerprint` of a manifest row: a 64-bit int,
for images the perceptual hash) differ in few bits.

Near-duplicate pairs are found by multi-index hashing, in near-linear time: cut the 64-bit hash
into m blocks; two hashes within d bits differ in at most d blocks, so they agree exactly on at
least m - d of them (pigeonhole). Bucketing the hashes by every choice of m - d blocks and
comparing only within buckets therefore finds every pair, and the exact distance filter keeps
only the true ones: the result is the brute-force result, pair for pair (tests/test_groups.py
checks it on random and adversarial hashes). m is picked per call from a cost estimate
(m = d + 1 is the classic scheme; more, narrower blocks matched several at a time give fewer
candidates); when no scheme beats comparing everything (small n, large d), it compares everything.

Near-duplicates do not chain: files are clustered around representatives (`near_clusters`), so a
long run of lookalikes A~B~C~... never becomes one group.
"""
import math

BLOCK = 512  # rows per step of the brute-force comparison


def brute_pairs(h, distance: int):
    """(i, j, bits) arrays of every i < j with popcount(h[i] ^ h[j]) <= distance, by comparing
    every hash with every other (the reference; quadratic). Sorted by (i, j)."""
    import numpy as np

    h = np.asarray(h, dtype=np.uint64)
    out_i, out_j, out_d = [], [], []
    for start in range(0, len(h), BLOCK):
        d = np.bitwise_count(h[start:start + BLOCK, None] ^ h[None, start:])
        i, j = np.nonzero(d <= distance)
        keep = j > i
        i, j = i[keep], j[keep]
        out_i.append(i + start)
        out_j.append(j + start)
        out_d.append(d[i, j])
    return _finish(out_i, out_j, out_d)


def _finish(out_i, out_j, out_d):
    import numpy as np

    if not out_i:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy(), z.copy()
    i = np.concatenate(out_i).astype(np.int64)
    j = np.concatenate(out_j).astype(np.int64)
    d = np.concatenate(out_d).astype(np.int64)
    order = np.lexsort((j, i))
    return i[order], j[order], d[order]


def _blocks(m: int) -> list[int]:
    """Bit masks of m contiguous blocks covering the 64 bits, widths as equal as possible."""
    masks, start = [], 0
    for b in range(m):
        width = 64 // m + (1 if b < 64 % m else 0)
        masks.append(((1 << width) - 1) << start)
        start += width
    return masks


def scheme(n: int, distance: int) -> tuple[int, int] | None:
    """(m blocks, k blocks matched at once, k = m - distance) of the cheapest multi-index scheme
    for n distinct uniform hashes, or None when comparing everything is cheaper. The estimate
    (nanoseconds, measured on this code): a bucketing pass ~ 150 n per key, a candidate ~ 20,
    a brute-force comparison ~ 1.5."""
    if distance < 0 or n < 2:
        return None
    best, brute = None, 1.5 * n * n / 2
    for m in range(distance + 1, 65):
        k = m - distance
        keys = math.comb(m, k)
        if keys > 5000:
            continue
        bits = sum(sorted(64 // m + (1 if b < 64 % m else 0) for b in range(m))[:k])
        cost = keys * (150 * n + 20 * n * n / 2 / 2.0 ** bits)
        if cost < brute and (best is None or cost < best[0]):
            best = (cost, m, k)
    return best[1:] if best else None


def hash_pairs(h, distance: int, force: tuple[int, int] | None = None):
    """(i, j, bits) arrays of every i < j with popcount(h[i] ^ h[j]) <= distance: exactly
    brute_pairs' result, by multi-index hashing (see the module's docstring). Sorted by (i, j).
    force: a (m, k) scheme to use instead of the estimated cheapest (tests)."""
    import itertools

    import numpy as np

    h = np.asarray(h, dtype=np.uint64)
    if distance < 0 or len(h) < 2:
        return _finish([], [], [])
    uniq, inverse = np.unique(h, return_inverse=True)  # identical hashes: handled once
    plan = force or scheme(len(uniq), distance)
    if plan is None:
        ui, uj, ud = brute_pairs(uniq, distance)
    else:
        m, k = plan
        masks = _blocks(m)
        found = []
        for combo in itertools.combinations(masks, k):
            key = uniq & np.uint64(sum(combo))
            order = np.argsort(key, kind="stable")
            sk = key[order]
            starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
            ends = np.r_[starts[1:], len(sk)]
            end_of = np.repeat(ends, ends - starts)  # the end of each position's bucket
            pos = np.flatnonzero(np.repeat(ends - starts > 1, ends - starts))
            step = 1
            while len(pos):  # every pair inside a bucket, by offset within it
                pos = pos[pos + step < end_of[pos]]
                if not len(pos):
                    break
                a, b = order[pos], order[pos + step]
                near = np.bitwise_count(uniq[a] ^ uniq[b]) <= distance
                if near.any():
                    a, b = a[near], b[near]
                    found.append(np.minimum(a, b).astype(np.int64) * len(uniq)
                                 + np.maximum(a, b))
                step += 1
        codes = np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
        ui, uj = codes // len(uniq), codes % len(uniq)
        ud = np.bitwise_count(uniq[ui] ^ uniq[uj]).astype(np.int64)
    return _expand(inverse, ui, uj, ud)


def _expand(inverse, ui, uj, ud):
    """Pairs of distinct hashes -> pairs of input positions, plus the pairs of equal hashes."""
    import numpy as np

    order = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse, minlength=int(inverse.max()) + 1 if len(inverse) else 0)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    out_i, out_j, out_d = [], [], []
    single = (counts[ui] == 1) & (counts[uj] == 1)
    out_i.append(order[first[ui[single]]])
    out_j.append(order[first[uj[single]]])
    out_d.append(ud[single])
    for u, v, d in zip(ui[~single], uj[~single], ud[~single], strict=True):
        a = order[first[u]:first[u] + counts[u]]
        b = order[first[v]:first[v] + counts[v]]
        aa, bb = np.meshgrid(a, b, indexing="ij")
        out_i.append(aa.ravel())
        out_j.append(bb.ravel())
        out_d.append(np.full(aa.size, d))
    for u in np.flatnonzero(counts > 1):
        a = order[first[u]:first[u] + counts[u]]
        aa, bb = np.triu_indices(len(a), 1)
        out_i.append(a[aa])
        out_j.append(a[bb])
        out_d.append(np.zeros(len(aa), dtype=np.int64))
    i = np.concatenate(out_i).astype(np.int64)
    j = np.concatenate(out_j).astype(np.int64)
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    return _finish([lo], [hi], [np.concatenate(out_d)])


def fingerprints(rows, fingerprint=None) -> list:
    """[(row, its fingerprint)] of the rows that have one. fingerprint: the modality's
    (row -> int or None); the default modality's unless given."""
    if fingerprint is None:
        from stages.lib.modality import DEFAULT, get

        fingerprint = get(DEFAULT).fingerprint
    return [(r, f) for r, f in ((r, fingerprint(r)) for r in rows) if f is not None]


def near_duplicate_pairs(rows, distance: int, fingerprint=None) -> list[tuple[str, str, int]]:
    """(path a, path b, Hamming distance) of every pair of different files whose fingerprints
    differ in at most `distance` bits; a < b, sorted. Exact copies are not listed here."""
    import numpy as np

    usable = sorted(fingerprints(rows, fingerprint), key=lambda rf: rf[0]["path"])
    if distance < 0 or len(usable) < 2:
        return []
    h = np.array([f for _, f in usable], dtype=np.uint64)
    pairs = []
    for i, j, d in zip(*hash_pairs(h, distance), strict=True):
        a, b = usable[i][0], usable[j][0]
        if a["sha256"] != b["sha256"]:
            pairs.append((a["path"], b["path"], int(d)))
    return sorted(pairs)


def near_clusters(rows, distance: int, fingerprint=None) -> dict[str, str]:
    """{sha256: its representative's sha256} for the distinct contents with a fingerprint.

    Contents are visited in sha256 order; each joins the nearest representative (the first in
    that order on ties) within `distance` bits of it, or else becomes a representative itself
    (so a re-encode stays with its original when that is a representative). A member is within
    `distance` of its representative, so a group's diameter is at most 2 x distance and a chain
    of lookalikes never grows one group. The result depends only on the set of contents, not on
    paths or listing order."""
    import numpy as np

    content = {}
    for r, f in fingerprints(rows, fingerprint):
        content.setdefault(r["sha256"], f)
    shas = sorted(content)
    if distance < 0 or not shas:
        return {s: s for s in shas}
    h = np.array([content[s] for s in shas], dtype=np.uint64)
    i, j, d = hash_pairs(h, distance)  # i < j: i comes first in sha order
    earlier = [[] for _ in shas]
    for a, b, bits in zip(i.tolist(), j.tolist(), d.tolist(), strict=True):
        earlier[b].append((bits, a))
    rep = list(range(len(shas)))
    for b, before in enumerate(earlier):
        for _, a in sorted(before):
            if rep[a] == a:  # the nearest representative within distance (the first on ties)
                rep[b] = a
                break
    return {s: shas[rep[x]] for x, s in enumerate(shas)}


def find(parent: dict, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def group_keys(rows, distance: int, chain: bool = False, fingerprint=None) -> dict[str, str]:
    """{path: group key}; the key is the smallest sha256 among the group's members, so a
    group's split is that of one real file and changes only when a member joins or leaves.

    Hard groups: the same content, the same `group` value. Near-duplicates join the group of
    their representative (near_clusters). chain=True is the old rule, kept only to show what it
    did: every near-duplicate pair unioned transitively. fingerprint: the modality's (the
    default modality's unless given)."""
    parent = {r["path"]: r["path"] for r in rows}

    def union(a, b):
        ra, rb = find(parent, a), find(parent, b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    first = {}
    for r in rows:
        for key in (("sha", r["sha256"]), ("group", r.get("group") or "")):
            if key[1]:
                union(first.setdefault(key, r["path"]), r["path"])
    if chain:
        for a, b, _ in near_duplicate_pairs(rows, distance, fingerprint):
            union(a, b)
    else:
        for sha, rep in near_clusters(rows, distance, fingerprint).items():
            if sha != rep:
                union(first[("sha", sha)], first[("sha", rep)])
    smallest = {}
    for r in rows:
        root = find(parent, r["path"])
        smallest[root] = min(smallest.get(root, r["sha256"]), r["sha256"])
    return {r["path"]: smallest[find(parent, r["path"])] for r in rows}
