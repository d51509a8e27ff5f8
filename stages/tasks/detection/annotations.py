"""Where detection labels come from: a YOLO tree or COCO json files.

YOLO: `images/<split>/<name>.<ext>` with `labels/<split>/<name>.txt` (rows `cls xc yc w h`,
normalised to 0-1) and `data.yaml` (`names`: a list, or a {id: name} mapping). An image with no
label file is background (no boxes); a label file with no image is a row of its own
(`orphan_label`).
COCO: `annotations/instances_<split>.json` plus the images, at `file_name` relative to the
source (or under `images/<split>/` or `<split>/`). Categories are matched by id, `iscrowd: 1`
annotations are left out (neither truth nor error), an annotation of an unknown image id is a
row of its own (`coco_unknown_image`), a listed image that is not there is `missing`.

Every box becomes [where, label, xc, yc, w, h] (normalised floats) in the manifest's `boxes`
column (JSON): `where` is the label file's line number or "annotation <id>" (COCO), `label` the
class name, or `#<id>` for a class id not in the names. A row that cannot be read is
[where, "!", why]: a COCO number must be a finite JSON number (never NaN, Infinity or a
string), `iscrowd` 0 or 1, `area` (optional) at least 0, `segmentation` (optional) polygons or an
RLE. validate judges them (checks.py); nothing here refuses a box. An image entry that
cannot be trusted (a bad id, width or height, an id or a file listed twice) is an error of its
file's row and gives it no boxes; `declared_size` is the COCO entry's `WxH` ("" for YOLO).
`annotation_sha256` is the hash of the image's label file (YOLO) or of its annotations as
canonical JSON (COCO), "" when it has none.
An image may have at most `validate.max_boxes` boxes (max_boxes below): a YOLO label file with
more non-empty lines, or a COCO image with more annotations, is the error `too_many_boxes`
(its row gets no boxes). A label file is read 1 MiB at a time and its boxes stop being kept
past the cap, so one image's memory and its manifest field stay bounded.
"""
import codecs
import hashlib
import json
import math
from pathlib import PurePosixPath

from stages.lib.io import StageError
from stages.lib.params import MAX_BOXES, MAX_BOXES_CAP
from stages.lib.userfiles import NOT_READ, check_inside, outside, read_yaml
from stages.tasks.base import Annotations

SPLITS = ("train", "val", "test")
IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm",
              ".ppm", ".pbm"}
BLANK = {"boxes": "[]", "annotation_sha256": "", "declared_size": "", "group": "", "timestamp": "",
         "split": ""}


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))


NAMES_FORM = ("`names` must be a list of class names (names: [red, green]) or a mapping from "
              "integer class ids, the first column of the label files, to names (names: {0: "
              "red, 1: green})")


def read_names(path) -> dict:
    """{class id: name} from data.yaml's `names` (a list or a mapping); StageError naming the
    file, the bad entry and NAMES_FORM for anything else."""
    data = read_yaml(path)
    names = (data or {}).get("names") if isinstance(data, dict) else None
    if isinstance(names, list):
        return {i: class_name(path, n, f"names[{i}]") for i, n in enumerate(names)}
    if not isinstance(names, dict):
        raise StageError(f"{path}: {NAMES_FORM}; it is {shown(names)}.")
    out = {}
    for key, value in names.items():
        text = key.strip() if isinstance(key, str) else None
        if isinstance(key, bool) or not (isinstance(key, int) or (text and text.isdecimal()
                                                                  and text.isascii())):
            raise StageError(f"{path}: `names` key {shown(key)} is not a class id; {NAMES_FORM}.")
        cls = int(key)
        if cls < 0:
            raise StageError(f"{path}: `names` key {cls} is negative; {NAMES_FORM}.")
        if cls in out:
            raise StageError(f"{path}: `names` gives class id {cls} twice ({out[cls]!r} and "
                             f"{value!r}); keep one.")
        out[cls] = class_name(path, value, f"names[{cls}]")
    return out


def class_name(path, value, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
        raise StageError(f"{path}: {where} is {shown(value)}, not a class name; {NAMES_FORM}.")
    return str(value)


UNUSED_SHOWN = 5  # unused_classes names this many of data.yaml's classes that have no box


def unused_classes(names: dict, used: set) -> list:
    """[("unused_classes", message)] when some of data.yaml's classes have no box in any label
    file (a data.yaml of another dataset, 100,000 names for 2 classes); [] when every one is
    used. The model's classes are the ones with boxes, so nothing breaks: a warning."""
    unused = [names[i] for i in sorted(names) if i not in used]
    if not unused:
        return []
    more, count = len(unused) - UNUSED_SHOWN, len(names) - len(unused)
    return [("unused_classes", f"data.yaml names {len(names)} classes, {count} of them "
             f"({100 * count / len(names):.3g}%) used by a box; "
             f"{len(unused)} have none: " + ", ".join(unused[:UNUSED_SHOWN])
             + (f" and {more} more" if more > 0 else "")
             + ". The model learns only the classes with boxes: check that data.yaml belongs "
               "to this dataset")]


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
LINE_CAP = 4096  # a label line longer than this is malformed (and only this much is kept)
READ_CHUNK = 1 << 20


class TooManyBoxes(ValueError):
    """More boxes than the cap; `count`: how many the file or image has."""

    def __init__(self, count: int):
        super().__init__(count)
        self.count = count


def too_many(where: str, count: int, cap: int) -> str:
    return (f"{where} {count} boxes, more than validate.max_boxes ({cap}): raise "
            f"validate.max_boxes (at most {MAX_BOXES_CAP:,}) or cut the image into tiles")


def label_lines(f, digest):
    """The lines of a binary label file as str.splitlines gives them on its text (UTF-8, a bad
    byte replaced), read READ_CHUNK bytes at a time, each byte also fed to digest: memory stays
    bounded however large the file is. A line over LINE_CAP characters is cut to LINE_CAP + 1
    (its length says it was longer)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending = ""
    while True:
        data = f.read(READ_CHUNK)
        digest.update(data)
        lines = (pending + decoder.decode(data, final=not data)).splitlines(keepends=True)
        # the last line may go on in the next chunk, or be the "\r" of a "\r\n" cut in two
        last = lines[-1] if lines else ""
        pending = lines.pop() if data and lines and (
            last.endswith("\r") or last.splitlines()[0] == last) else ""
        if len(pending) > LINE_CAP + 1:
            pending = pending[:LINE_CAP + 1] + ("\r" if pending.endswith("\r") else "")
        for line in lines:
            yield line.splitlines()[0][:LINE_CAP + 1]
        if not data:
            return


def parse_yolo(text, names: dict, cap: int = 0) -> list:
    """The boxes of one YOLO label file (see the module doc); text: its text or its lines.
    cap: the most boxes (non-empty lines) it may have, 0 = any; TooManyBoxes past it, once every
    line is counted (none of them kept)."""
    out = []
    lines = iter(text.splitlines() if isinstance(text, str) else text)
    for number, line in enumerate(lines, 1):
        parts = line.split()
        if not parts:
            continue
        if cap and len(out) == cap:
            raise TooManyBoxes(cap + 1 + sum(1 for rest in lines if rest.split()))
        if len(line) > LINE_CAP:
            out.append([number, "!", f"a line of more than {LINE_CAP:,} characters: "
                                     f"{line.strip()[:60]}..."])
            continue
        if len(parts) != 5:
            out.append([number, "!", f"{len(parts)} columns, not 5 (cls xc yc w h)"])
            continue
        try:
            values = [float(v) for v in parts[1:]]
            cls = int(parts[0])
        except ValueError:
            out.append([number, "!", f"not a number: {line.strip()[:60]}"])
            continue
        if not all(math.isfinite(v) for v in values):
            out.append([number, "!", f"not a finite number: {line.strip()[:60]}"])
            continue
        out.append([number, names.get(cls, f"#{parts[0]}"), *values])
    return out


def split_of(rel: str) -> str:
    parts = PurePosixPath(rel).parts
    for part in parts[:-1]:
        if part in SPLITS:
            return part
    return ""


def read_yolo(source, listing, max_boxes: int = MAX_BOXES) -> Annotations:
    out = Annotations(skip={"data.yaml"})
    names = read_names(check_inside(source, source / "data.yaml"))
    files = {rel for rel, kind, _ in listing if kind == "file"}
    labels = {rel for rel in files if rel.startswith("labels/") and rel.endswith(".txt")}
    out.skip |= labels
    label_of, used = {}, set()
    for rel, kind, _ in listing:
        if kind != "file" or rel in out.skip:
            continue
        values = {**BLANK, "split": split_of(rel)}
        if rel.startswith("images/"):
            label = "labels/" + str(PurePosixPath(rel[len("images/"):]).with_suffix(".txt"))
            label_of[label] = rel
            if label in labels and outside(source, source / label):
                out.errors[rel] = ("symlink", f"its label file {label} is {NOT_READ}")
            elif label in labels:
                values.update(yolo_labels(source, label, names, max_boxes, rel, out, used))
            else:
                values["boxes"] = ""  # no label file: background (validate: no_labels)
        out.values[rel] = values
    for label in sorted(labels - set(label_of)):
        out.extra.append(label)
        out.values[label] = {**BLANK, "split": split_of(label)}
        out.errors[label] = ("orphan_label", "a label file with no image (expected "
                             + str(PurePosixPath("images", *PurePosixPath(label).parts[1:])
                                   .with_suffix(".*")) + ")")
    out.warnings += unused_classes(names, {i for i, n in names.items() if n in used})
    return out


def yolo_labels(source, label: str, names: dict, cap: int, rel: str, out, used: set) -> dict:
    """{boxes, annotation_sha256} of an image's label file; a file that cannot be read or holds
    more than cap boxes is an error of the image's row (out.errors) with no boxes. The names of
    its boxes' classes join `used`."""
    digest, boxes = hashlib.sha256(), []
    try:
        with open(source / label, "rb") as f:
            boxes = parse_yolo(label_lines(f, digest), names, cap)
    except OSError as exc:  # a broken link, no permission
        out.errors[rel] = ("unreadable", f"its label file {label} cannot be read "
                                         f"({exc.strerror})")
        digest = hashlib.sha256()
    except TooManyBoxes as exc:
        out.errors[rel] = ("too_many_boxes", too_many(f"its label file {label} holds",
                                                      exc.count, cap))
        boxes = []
    used.update(b[1] for b in boxes if b[1] != "!")
    sha = digest.hexdigest()
    return {"boxes": dumps(boxes), "annotation_sha256": "" if sha == EMPTY_SHA256 else sha}


def find_image(file_name: str, split: str, files: set) -> str | None:
    for rel in (file_name, f"images/{split}/{file_name}", f"{split}/{file_name}",
                f"images/{file_name}"):
        if rel in files:
            return rel
    return None


def shown(value) -> str:
    """A value from a COCO file as the message names it: JSON's spelling (NaN, Infinity, null),
    a string quoted and called one, at most 60 characters."""
    if isinstance(value, str):
        return f"{value[:40]!r} (a string)"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def number(value, what: str) -> float:
    """A finite JSON number (never a string, a boolean, NaN or Infinity); ValueError naming
    `what` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {shown(value)}, not a number")
    if not math.isfinite(value):
        raise ValueError(f"{what} is {shown(value)}, not a finite number")
    return float(value)


def integer(value, what: str) -> int:
    """A JSON integer (2.0 is one); ValueError naming `what` otherwise."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is {shown(value)}, not an integer")
    return value


def positive(value, what: str) -> float:
    out = number(value, what)
    if out <= 0:
        raise ValueError(f"{what} is {shown(value)}, not above 0")
    return out


def size_text(w: float, h: float) -> str:
    """A declared size as the manifest writes an image's (`80x40`)."""
    return "x".join(str(int(v)) if v.is_integer() else str(v) for v in (w, h))


def load_coco(path, js: str) -> tuple[list, list, dict]:
    """(images, annotations, {category id: name}) of one COCO file: lists of JSON objects;
    StageError naming the file and the entry for anything the whole file depends on."""
    def fail(why: str):
        raise StageError(f"{path}: {why}; fix {js} (a COCO instances file).")

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StageError(f"{path}: not a COCO instances file ({exc}).") from None
    if not isinstance(data, dict):
        fail("not a JSON object with `images`, `annotations` and `categories`")
    lists = {}
    for key in ("images", "annotations", "categories"):
        entries = data.get(key, [])
        if not isinstance(entries, list):
            fail(f"`{key}` is {shown(entries)}, not a list")
        for k, entry in enumerate(entries):
            if not isinstance(entry, dict):
                fail(f"{key}[{k}] is {shown(entry)}, not an object")
        lists[key] = entries
    categories = {}
    for k, c in enumerate(lists["categories"]):
        try:
            cat = integer(c.get("id"), "id")
        except ValueError as exc:
            fail(f"categories[{k}]: {exc}")
        name = c.get("name")
        if isinstance(name, bool) or not isinstance(name, (str, int)):
            fail(f"categories[{k}]: name is {shown(name)}, not a class name")
        if categories.get(cat, str(name)) != str(name):
            fail(f"categories[{k}]: id {cat} is already the category {categories[cat]!r}")
        categories[cat] = str(name)
    return lists["images"], lists["annotations"], categories


def annotation_order(ann) -> tuple:
    """Sort key of annotations by id, whatever type a (bad) id has."""
    i = ann.get("id")
    return (0, i, "") if isinstance(i, int) and not isinstance(i, bool) else (1, 0, shown(i))


def crowd(ann) -> bool:
    """Whether an annotation is a crowd region: `iscrowd` is 1 (0 or absent: an object);
    ValueError for anything else ("0", NaN, 2, true, null), and for an `area` that is not a
    finite number >= 0 or a `segmentation` that is neither polygons nor an RLE (both optional:
    absent or null is none)."""
    value = ann.get("iscrowd", 0)
    if isinstance(value, bool) or value not in (0, 1):  # 1.0 is 1; "0", NaN, null are not
        raise ValueError(f"iscrowd is {shown(value)}, not 0 or 1")
    if ann.get("area") is not None and number(ann["area"], "area") < 0:
        raise ValueError(f"area is {shown(ann['area'])}, not 0 or above")
    if ann.get("segmentation") is not None:
        segmentation(ann["segmentation"])
    return value == 1


def segmentation(value) -> None:
    """ValueError unless value is COCO's polygons (a list of lists of an even number of finite
    numbers; [] when there are none) or an RLE ({"counts": a string or a list of integers,
    "size": [height, width]})."""
    if isinstance(value, list):
        for k, polygon in enumerate(value):
            if not isinstance(polygon, list) or len(polygon) % 2:
                raise ValueError(f"segmentation[{k}] is {shown(polygon)}, not a polygon (a list "
                                 f"of x, y numbers)")
            for i, v in enumerate(polygon):
                number(v, f"segmentation[{k}][{i}]")
        return
    if isinstance(value, dict) and set(value) >= {"counts", "size"}:
        size, counts = value["size"], value["counts"]
        if not isinstance(size, list) or len(size) != 2:
            raise ValueError(f"segmentation size is {shown(size)}, not [height, width]")
        for i, v in enumerate(size):
            integer(v, f"segmentation size[{i}]")
        if isinstance(counts, list):
            for i, v in enumerate(counts):
                integer(v, f"segmentation counts[{i}]")
        elif not isinstance(counts, str):
            raise ValueError(f"segmentation counts is {shown(counts)}, not an RLE (a string or "
                             f"a list of integers)")
        return
    raise ValueError(f"segmentation is {shown(value)}, not polygons (a list of lists) or an RLE "
                     f"({{counts, size}})")


def coco_boxes(anns, categories, w: float, h: float) -> list:
    """The boxes of one image's annotations (crowd ones left out), normalised by its declared
    size; an annotation with a bad number, a bad `iscrowd`, `area` or `segmentation` is a
    malformed row naming it (a bad `iscrowd` is never read as a crowd: its box would vanish
    without a word)."""
    boxes = []
    for ann in anns:
        where = f"annotation {ann.get('id')}"
        try:
            if crowd(ann):
                continue
            cat = integer(ann.get("category_id"), "category_id")
            bbox = ann.get("bbox")
            if not isinstance(bbox, list) or len(bbox) != 4:
                raise ValueError(f"bbox is {shown(bbox)}, not [x, y, width, height]")
            x, y, bw, bh = (number(v, f"bbox[{k}]") for k, v in enumerate(bbox))
        except ValueError as exc:
            boxes.append([where, "!", str(exc)])
            continue
        boxes.append([where, categories.get(cat, f"#{cat}"), (x + bw / 2) / w,
                      (y + bh / 2) / h, bw / w, bh / h])
    return boxes


def problem(out: Annotations, key: str, kind: str, why: str, split: str) -> None:
    """An annotation error of key (the first one found stays); a key that is not a file under
    the source gets a row of its own."""
    if key not in out.values:
        out.extra.append(key)
        out.values[key] = {**BLANK, "split": split}
    out.errors.setdefault(key, (kind, why))


def read_coco(source, listing, jsons, max_boxes: int = MAX_BOXES) -> Annotations:
    """Rows of COCO files. Besides the boxes: an image entry whose id, width or height is not a
    finite number (width, height above 0) is `coco_bad_value`; an id listed twice is
    `coco_duplicate_id` for every image listing it (whose boxes are they?); a file listed twice
    (in one file or several) is `coco_duplicate_file`. The declared size goes to
    `declared_size`, for validate's `coco_size_mismatch`."""
    out = Annotations(skip=set(jsons))
    files = {rel for rel, kind, _ in listing if kind == "file"}
    for rel, kind, _ in listing:
        if kind == "file" and rel not in out.skip:
            out.values[rel] = {**BLANK, "split": split_of(rel), "boxes": ""}
    parsed, listed = coco_entries(source, jsons, files)
    for js, split, entries, annotations, categories in parsed:
        given = split if split in SPLITS else ""
        ids, per_image = coco_ids(out, js, entries, annotations, given)
        for k, im, rel, image_id in entries:
            coco_image(out, (js, given, categories, ids, per_image, listed, max_boxes), k, im,
                       rel, image_id)
    return out


def coco_entries(source, jsons, files) -> tuple[list, dict]:
    """Each COCO file's (json, split, entries, annotations, categories), an entry being
    (k, image entry, file or None, id or ValueError), and where each file is listed:
    {file: [(json, image id or entry)]}."""
    parsed, listed = [], {}
    for js in sorted(jsons):
        split = PurePosixPath(js).stem.removeprefix("instances_")
        images, annotations, categories = load_coco(check_inside(source, source / js), js)
        entries = []
        for k, im in enumerate(images):
            name = im.get("file_name")
            rel = find_image(name, split, files) if isinstance(name, str) and name else None
            try:
                image_id = integer(im.get("id"), "id")
            except ValueError as exc:
                image_id = exc
            entries.append((k, im, rel, image_id))
            if rel is not None:
                listed.setdefault(rel, []).append(
                    (js, f"image id {image_id}" if isinstance(image_id, int) else
                     f"images[{k}]"))
        parsed.append((js, split, entries, annotations, categories))
    return parsed, listed


def coco_ids(out: Annotations, js: str, entries, annotations, given: str) -> tuple[dict, dict]:
    """One COCO file's image ids ({id: [file_name]}) and its annotations per image id; an
    annotation of an unknown image id is a row of its own."""
    ids = {}
    for _, im, _, image_id in entries:
        if isinstance(image_id, int):
            ids.setdefault(image_id, []).append(str(im.get("file_name")))
    per_image = {i: [] for i in ids}
    for ann in annotations:
        try:
            image_id = integer(ann.get("image_id"), "image_id")
            known = image_id in per_image
            why = f" refers to image id {image_id}, not in images"
        except ValueError as exc:
            known, why = False, f": {exc}"
        if not known:
            problem(out, f"{js}#annotation={ann.get('id')}", "coco_unknown_image",
                    f"annotation {ann.get('id')}{why}", given)
            continue
        per_image[image_id].append(ann)
    return ids, per_image


def coco_image(out: Annotations, context, k, im, rel, image_id) -> None:
    """One image entry of a COCO file: its row's boxes, split, declared size and hash, or the
    first problem found. context: (json, split given, categories, ids, per_image, listed,
    max_boxes)."""
    js, given, categories, ids, per_image, listed, cap = context
    name = im.get("file_name")
    if not isinstance(name, str) or not name:
        problem(out, f"{js}#images[{k}]", "coco_bad_value",
                f"{js}, images[{k}]: file_name is {shown(name)}, not a file name",
                given)
        return
    if isinstance(image_id, ValueError):
        problem(out, rel or name, "coco_bad_value", f"{js}, images[{k}]: {image_id}",
                given)
        return
    anns = sorted(per_image[image_id], key=annotation_order)
    if rel is None:
        problem(out, name, "missing", f"listed in {js} (image id {image_id}) with "
                                      f"{len(anns)} annotations, but not found", given)
        return
    if len(ids[image_id]) > 1:
        problem(out, rel, "coco_duplicate_id",
                f"image id {image_id} is listed {len(ids[image_id])} times in {js} "
                f"({', '.join(ids[image_id])}): whose annotations are they? Give each "
                f"image its own id", given)
        return
    if len(listed[rel]) > 1:
        if {j for j, _ in listed[rel]} == {js}:
            where = (f"{len(listed[rel])} times in {js} (image ids "
                     + ", ".join(i.removeprefix("image id ") for _, i in listed[rel])
                     + ")")
        else:
            where = f"{len(listed[rel])} times: " + ", ".join(
                f"{j} ({i})" for j, i in listed[rel])
        problem(out, rel, "coco_duplicate_file",
                f"listed {where}: keep one entry per file", given)
        return
    if len(anns) > cap:  # before any box is made: memory and the field stay bounded
        problem(out, rel, "too_many_boxes",
                too_many(f"{js}, image id {image_id}: its annotations hold", len(anns), cap),
                given)
        return
    try:
        w = positive(im.get("width"), "width")
        h = positive(im.get("height"), "height")
    except ValueError as exc:
        problem(out, rel, "coco_bad_value", f"{js}, image id {image_id}: {exc}", given)
        return
    canonical = dumps([{key: a[key] for key in sorted(a)} for a in anns]).encode()
    out.values[rel].update(
        boxes=dumps(coco_boxes(anns, categories, w, h)), split=given,
        declared_size=size_text(w, h),
        annotation_sha256=hashlib.sha256(canonical).hexdigest() if anns else "")


def read_annotations(source, listing, max_boxes: int = MAX_BOXES) -> Annotations:
    files = {rel for rel, kind, _ in listing if kind == "file"}
    jsons = sorted(rel for rel in files
                   if rel.startswith("annotations/instances_") and rel.endswith(".json"))
    if jsons:
        return read_coco(source, listing, jsons, max_boxes)
    if "data.yaml" in files:
        return read_yolo(source, listing, max_boxes)
    raise StageError(f"{source}: not a detection dataset: it needs data.yaml (YOLO: "
                     f"images/<split>/, labels/<split>/*.txt) or "
                     f"annotations/instances_<split>.json (COCO).")
