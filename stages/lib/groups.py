"""Which files must share a split: same content, near-duplicates and a shared `group` value.

validate reports near-duplicate pairs and split keeps each group together, both through this
module, so what the report names and what the split does cannot disagree.
"""

PHASH_MIN_SIDE = 16  # below this a perceptual hash cannot tell a duplicate from a lookalike
BLOCK = 512


def near_duplicate_pairs(rows, distance: int) -> list[tuple[str, str, int]]:
    """(path a, path b, Hamming distance) of every pair of different files whose perceptual
    hashes differ in at most `distance` bits; a < b, sorted. Exact copies are not listed here."""
    import numpy as np

    usable = [r for r in rows if r.get("phash") and not r.get("error")
              and min(int(r["width"]), int(r["height"])) >= PHASH_MIN_SIDE]
    if distance < 0 or len(usable) < 2:
        return []
    usable.sort(key=lambda r: r["path"])
    h = np.array([int(r["phash"], 16) for r in usable], dtype=np.uint64)
    pairs = []
    for start in range(0, len(h), BLOCK):
        d = np.bitwise_count(h[start:start + BLOCK, None] ^ h[None, :])
        for i, j in zip(*np.nonzero(d <= distance), strict=True):
            a, b = usable[start + i], usable[j]
            if start + i < j and a["sha256"] != b["sha256"]:
                pairs.append((a["path"], b["path"], int(d[i, j])))
    return sorted(pairs)


def find(parent: dict, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def group_keys(rows, distance: int) -> dict[str, str]:
    """{path: group key}; the key is the smallest sha256 among the group's members, so a
    group's split is that of one real file and changes only when a member joins or leaves."""
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
    for a, b, _ in near_duplicate_pairs(rows, distance):
        union(a, b)
    smallest = {}
    for r in rows:
        root = find(parent, r["path"])
        smallest[root] = min(smallest.get(root, r["sha256"]), r["sha256"])
    return {r["path"]: smallest[find(parent, r["path"])] for r in rows}
