"""Assign every usable file to train, val or test: a split that never drifts and never leaks.

By hash (default): a file's split is a pure function of (content hash, split.seed), so adding
images never moves an existing one and the test set stays fixed as data grows. Files that must
not straddle splits (identical content, a shared `group` value from labels.csv, near-duplicates
clustered around representatives: stages.lib.data.groups) form a group, and the whole group takes
the split of its smallest member hash; an old file moves only when new data joins its chain of
lookalikes, and the log says so. Each class's realised share of each split is checked against
its target within a binomial tolerance (split.balance_z); beyond it the class, its shares and the
largest groups responsible are named (split.on_imbalance: warn | fail).
By time: groups are ordered by their latest `timestamp` and cut chronologically, train before
val before test, so no future data leaks into training.
By given: the dataset's own split (the manifest's `split` column). A split the data lacks is
carved from train by the hash rule over train's groups: val (split.val of train) when it has no
val, test (split.test of train) when it has no test, as most YOLO and COCO releases ship train and
val only; stable as data grows, groups and near-duplicates kept whole, and said in the log and in
metrics/split.json (`carved`). Exact and near duplicates across the given splits are counted in
metrics/split.json and warned about.
Quarantined and broken files never reach a split. Files are listed, never moved.
"""
import hashlib
import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, write_bytes, write_csv, write_json
from stages.lib.params import params_option

MANIFEST = Path("data/manifest.csv")
QUARANTINE = Path("data/quarantine.csv")
OUT_DIR = Path("data/split")
METRICS = Path("metrics/split.json")
LAST_DIR = Path(".cache/split")  # previous assignment, only to log moves (not an out)
SPLITS = ("train", "val", "test")


def split_fields(task) -> list[str]:
    """The split lists' columns: path, the task's annotation columns, sha256."""
    return ["path", *task.annotation_fields, "sha256"]


def assign(sha256: str, seed: int, val: float, test: float) -> str:
    """Map a content hash to a split; uniform in [0, 1) and stable for a given seed."""
    u = int(hashlib.sha256(f"{seed}:{sha256}".encode()).hexdigest()[:15], 16) / 16**15
    return "test" if u < test else "val" if u < test + val else "train"


def parse_time(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return datetime.fromisoformat(value).timestamp()


def by_time(rows, keys, val, test) -> dict[str, str]:
    """{group key: split}, cutting groups ordered by their latest timestamp."""
    bad = []
    latest, size = {}, Counter()
    for r in rows:
        try:
            t = parse_time(r.get("timestamp") or "")
        except ValueError:
            bad.append(r["path"])
            continue
        k = keys[r["path"]]
        latest[k] = max(latest.get(k, t), t)
        size[k] += 1
    if bad:
        raise StageError(f"split.by is time, but {len(bad)} files have no valid ISO 8601 or "
                         f"numeric `timestamp` in labels.csv: " + ", ".join(sorted(bad)))
    out, done, total = {}, 0, len(rows)
    for k in sorted(latest, key=lambda k: (latest[k], k)):
        u = done / total  # where the group starts on the time line
        out[k] = "train" if u < 1 - val - test else "val" if u < 1 - test else "test"
        done += size[k]
    return out


SLACK = 0.01  # added to the binomial tolerance: rounding and tiny classes


def carved(rows) -> list[str]:
    """The splits by_given carves from train: those no row of the data's own split is in."""
    present = {r.get("split") or "" for r in rows}
    return [name for name in ("val", "test") if name not in present]


def ignored_own_split(rows, by: str) -> list[str]:
    """A warning when the data names its own val or test files (a dataset's test list,
    synth_ocr --test-set's held-out renderer, synth_speech --holdout) but split.by is not
    given: those files are split by the rule instead, some of them into train."""
    own = {}
    for r in rows:
        if (r.get("split") or "") in ("val", "test"):
            own.setdefault(r["split"], []).append(r["path"])
    if by == "given" or not own:
        return []
    named = ", ".join(f"{len(v)} as {k} (e.g. {min(v)})" for k, v in sorted(own.items()))
    return [f"split: warning: the data names its own split ({named}), but split.by is {by}: "
            f"they are split by {by}, some into train; set split.by: given to keep them"]


def by_given(rows, keys, seed, val, test) -> dict[str, str]:
    """{path: split} from each row's own `split` (train, val or test). A split no row is in
    (val, test or both) is carved from train by the hash rule: a train group goes to test when
    its key's uniform draw is below `test`, to val when below `test + val` (only the missing
    splits' shares count), so it is stable as data grows and groups stay whole."""
    wrong = sorted(r["path"] for r in rows if (r.get("split") or "") not in SPLITS)
    if wrong:
        raise StageError(
            f"split.by is given, but {len(wrong)} usable files have no split (train, val or "
            f"test: the folder <source>/<split>/<class>/ or labels.csv's `split` column): "
            + ", ".join(wrong[:20]) + (" ..." if len(wrong) > 20 else ""))
    out = {r["path"]: r["split"] for r in rows}
    missing = carved(rows)
    shares = (val if "val" in missing else 0.0, test if "test" in missing else 0.0)
    if missing:
        for r in rows:
            if out[r["path"]] == "train":
                out[r["path"]] = assign(keys[r["path"]], seed, *shares)
    return out


def plan(rows, seed, val, test, by="hash", distance=-1, fingerprint=None):
    """({path: split}, {path: group key}) of the usable rows (fingerprint: the task's
    modality's, stages/lib/data/groups.py)."""
    from stages.lib.data.groups import group_keys

    keys = group_keys(rows, distance, fingerprint=fingerprint)
    if by == "given":
        return by_given(rows, keys, seed, val, test), keys
    if by == "time":
        where = by_time(rows, keys, val, test)
    else:
        where = {k: assign(k, seed, val, test) for k in set(keys.values())}
    return {r["path"]: where[keys[r["path"]]] for r in rows}, keys


def split_rows(rows, seed, val, test, by="hash", distance=-1,
               fields=("path", "label", "sha256")) -> dict[str, list[dict]]:
    """{split: rows (only `fields`) sorted by path}; groups (see stages.lib.data.groups) never
    straddle splits (by hash or time; by given, the data's own split is kept)."""
    where, _ = plan(rows, seed, val, test, by, distance)
    out = {name: [] for name in SPLITS}
    for r in sorted(rows, key=lambda r: r["path"]):
        out[where[r["path"]]].append({k: r[k] for k in fields})
    return out


def tolerance(target: float, n: int, z: float) -> float:
    """How far a class's share of a split may be from its target: z binomial standard
    deviations of a share of n independent draws, plus SLACK."""
    return z * (target * (1 - target) / n) ** 0.5 + SLACK if n else 1.0


def balance(rows, where, keys, task, val, test, z) -> list[dict]:
    """Every (class, split) whose realised share is off its target by more than tolerance(),
    with the largest groups responsible (those in the split when the share is high, those in
    the other splits when it is low). Uses the task's label_counts, so any task with classes."""
    from collections import defaultdict

    targets = {"train": 1 - val - test, "val": val, "test": test}
    members = defaultdict(list)
    for r in rows:
        members[keys[r["path"]]].append(r)
    per_group = {k: task.label_counts(m) for k, m in members.items()}
    total = task.label_counts(rows)
    found = []
    for name in SPLITS:
        counts = task.label_counts([r for r in rows if where[r["path"]] == name])
        for c in sorted(total, key=str):
            n, t = total[c], targets[name]
            share, tol = counts.get(c, 0) / n, tolerance(t, total[c], z)
            if abs(share - t) <= tol:
                continue
            high = share > t
            culprits = sorted(((g[c], k) for k, g in per_group.items() if g.get(c)
                               and (where[members[k][0]["path"]] == name) == high),
                              key=lambda x: (-x[0], x[1]))[:3]
            found.append({
                "class": str(c), "split": name, "share": round(share, 4), "target": t,
                "tolerance": round(tol, 4), "files": n,
                "groups": [{"size": size, "files": len(members[k]),
                            "split": where[members[k][0]["path"]],
                            "example": min(r["path"] for r in members[k]), "key": k[:12]}
                           for size, k in culprits]})
    return found


def balance_lines(found) -> list[str]:
    lines = []
    for f in found:
        groups = "; ".join(f"{g['size']} of its files in a group of {g['files']} in {g['split']}"
                           f" (e.g. {g['example']})" for g in f["groups"])
        lines.append(f"class {f['class']}: {f['split']} share {f['share']:.3f}, target "
                     f"{f['target']:.3f} (tolerance {f['tolerance']:.3f}, {f['files']} files); "
                     f"largest groups: {groups or 'none'}")
    return lines


def leakage(rows, where, distance, examples=5, fingerprint=None) -> dict:
    """Exact and near duplicates across splits: {"train-test": {"exact", "near", "examples"},
    ...} (exact: contents in both; near: fingerprint pairs of different contents). By hash or time
    exact copies never straddle; near pairs may, between two representatives' groups."""
    from collections import defaultdict

    from stages.lib.data.groups import near_duplicate_pairs

    out = {f"{a}-{b}": {"exact": 0, "near": 0, "examples": []}
           for a, b in (("train", "test"), ("train", "val"), ("val", "test"))}
    paths = defaultdict(lambda: defaultdict(list))
    for r in sorted(rows, key=lambda r: r["path"]):
        paths[r["sha256"]][where[r["path"]]].append(r["path"])
    for by_split in paths.values():
        for key, o in out.items():
            a, b = key.split("-")
            if by_split.get(a) and by_split.get(b):
                o["exact"] += 1
                if len(o["examples"]) < examples:
                    o["examples"].append(f"{by_split[a][0]} = {by_split[b][0]}")
    for p, q, d in near_duplicate_pairs(rows, distance, fingerprint):
        s = sorted((where[p], where[q]), key=SPLITS.index)
        o = out.get(f"{s[0]}-{s[1]}")
        if o is not None:
            o["near"] += 1
            if len(o["examples"]) < 2 * examples:
                o["examples"].append(f"{p} ~ {q} (distance {d})")
    return out


def moved(previous: dict, splits) -> list[str]:
    """Log lines for files that were split before, with the same content, and now moved."""
    lines = []
    for name, part in splits.items():
        for r in part:
            old = previous.get(r["path"])
            if old and old[0] == r["sha256"] and old[1] != name:
                lines.append(f"split: {r['path']} moved {old[1]} -> {name}: new data joined its "
                             f"group (same content, near-duplicate or shared `group`)")
    return lines


@click.command()
@params_option
def main(params_path):
    """Write data/split/{train,val,test}.csv and metrics/split.json from the manifest.

    Reads `task`, `split.by` (hash | time | given), `split.seed`, `split.val` and `split.test`
    (fractions; under given, the shares of train carved out as val or test when the data has
    no such split), `split.balance_z` and `split.on_imbalance` (the per-class share check), and
    `validate.near_dup_distance` (near-duplicates share a split). Files listed in
    data/quarantine.csv or with an error in the manifest are left out.
    """
    from stages.tasks import open_stage

    task, params, _ = open_stage("split", params_path)  # first: params that do not fit stop
    p = params["split"]
    distance = params["validate"].near_dup_distance
    quarantined = {r["path"] for r in read_csv(QUARANTINE)}
    rows = [r for r in read_csv(MANIFEST) if not r["error"] and r["path"] not in quarantined]
    fields = split_fields(task)
    fingerprint = task.modality.fingerprint
    where, keys = plan(rows, p.seed, p.val, p.test, p.by, distance, fingerprint)
    for line in ignored_own_split(rows, p.by):
        click.echo(line, err=True)
    splits = {name: [] for name in SPLITS}
    for r in sorted(rows, key=lambda r: r["path"]):
        splits[where[r["path"]]].append({k: r[k] for k in fields})
    for name, part in splits.items():
        if not part:
            raise StageError(f"split: the {name} split is empty; add data or raise split.{name}.")
        write_csv(OUT_DIR / f"{name}.csv", part, fields)
    last = LAST_DIR / f"{p.by}-{p.seed}-{p.val}-{p.test}-{distance}.json"
    previous = json.loads(last.read_text()) if last.exists() else {}
    for line in moved(previous, splits):
        click.echo(line)
    write_bytes(last, json.dumps({r["path"]: [r["sha256"], name] for name, part in splits.items()
                                  for r in part}).encode())
    metrics = {name: dict(sorted(task.label_counts(part).items()))
               for name, part in splits.items()}
    off = balance(rows, where, keys, task, p.val, p.test, p.balance_z) if p.by == "hash" else []
    metrics["balance"] = {"checked": p.by == "hash", "z": p.balance_z, "slack": SLACK,
                          "off_target": len(off), "findings": off}
    metrics["leakage"] = leakage(rows, where, distance, fingerprint=fingerprint)
    if p.by == "given":  # the splits the data lacked, carved from train: {split: files}
        metrics["carved"] = {name: len(splits[name]) for name in carved(rows)}
        for name, n in metrics["carved"].items():
            click.echo(f"split: the data has no {name} split of its own: {n} files carved "
                       f"from train as {name} (split.{name} {getattr(p, name)} of train's "
                       f"groups by the hash rule, split.seed {p.seed}; groups and "
                       f"near-duplicates kept whole)")
    for key, o in metrics["leakage"].items():
        if p.by == "given" and (o["exact"] or o["near"]):
            click.echo(f"split: warning: {key} leakage in the given split: {o['exact']} "
                       f"contents in both, {o['near']} near-duplicate pairs; e.g. "
                       + "; ".join(o["examples"][:3]))
        elif o["near"]:  # lookalikes of two different groups (no chaining): counted, shown
            click.echo(f"split: {key}: {o['near']} near-duplicate pairs of different groups "
                       f"(each file is grouped with its nearest representative only)")
    write_json(METRICS, metrics)
    click.echo("split: " + ", ".join(f"{n} {len(splits[n])}" for n in SPLITS)
               + (f" ({len(quarantined)} quarantined files left out)" if quarantined else ""))
    if off:
        message = (f"split: {len(off)} per-class shares are off their targets beyond the "
                   f"tolerance (split.balance_z {p.balance_z}):\n  "
                   + "\n  ".join(balance_lines(off)))
        if p.on_imbalance == "fail":
            raise StageError(message + "\nset split.on_imbalance: warn to go on anyway.")
        click.echo("warning: " + message)

if __name__ == "__main__":
    main()
