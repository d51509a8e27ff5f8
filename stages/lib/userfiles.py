"""Reading the files a user hands the pipeline (annotation files, YAML) without trusting them.

An annotation file is read only when it, followed through every symlink, lies inside the data
folder: ingest already refuses images that link outside it (a dataset that links to
/etc/passwd or to another project's class names must not pull them in).
"""
from pathlib import Path

from stages.lib.io import StageError

OUTSIDE = "a symlink to a file outside data.source"
NOT_READ = f"{OUTSIDE}: not read; copy the file in instead of linking to it"


def escapes(root, path) -> bool:
    """Whether path, followed through every symlink (in any component), ends outside root.
    RuntimeError or OSError on a symlink loop."""
    return not Path(path).resolve().is_relative_to(Path(root).resolve())


def outside(root, path) -> bool:
    """escapes(), with a symlink loop counted as outside (it can be read from nowhere)."""
    try:
        return escapes(root, path)
    except (OSError, RuntimeError):
        return True


def check_inside(root, path) -> Path:
    """path, or a one-line StageError naming it when it links outside root (the data folder):
    for an annotation file the whole dataset depends on (data.yaml, a COCO json,
    classes.yaml, dataset.json, an OCR list, labels.csv)."""
    path = Path(path)
    if outside(root, path):
        raise StageError(f"{path}: {OUTSIDE} (ingest reads no annotation file from outside "
                         f"it); copy the file into data.source instead of linking to it.")
    return path


# --- YAML -------------------------------------------------------------------------------------

MAX_YAML_BYTES = 4 << 20  # params.yaml, data.yaml, classes.yaml are a few KB
# What a document may hold once its aliases (*name) are expanded: a 10-line "billion laughs"
# holds billions, which PyYAML shares but str(), json or a class list would write out (GBs).
MAX_YAML_VALUES = 1_000_000


def _children(node) -> list:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _expanded(root) -> int:
    """How many values the node graph holds with every alias written out; ValueError when it
    is recursive or holds more than MAX_YAML_VALUES. Each node is visited once (a depth-first
    walk with an explicit stack: the nodes whose end is pending are the current path)."""
    size, path, stack = {}, set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] > MAX_YAML_VALUES:
                raise ValueError(f"its aliases (*name) expand to more than "
                                 f"{MAX_YAML_VALUES:,} values; write the values out")
            continue
        if key in size:
            continue
        path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in path:
                raise ValueError("an alias (*name) refers to its own anchor: a recursive "
                                 "structure; write the values out")
            stack.append((child, False))
    return size[id(root)]


def _read_small(path: Path) -> bytes:
    """At most MAX_YAML_BYTES + 1 bytes of a regular file (a FIFO is never waited on)."""
    from stages.lib.safefs import NotRegular, open_regular

    try:
        f = open_regular(path)
    except NotRegular:
        raise StageError(f"{path}: not a regular file; it must be a YAML file.") from None
    with f:
        return f.read(MAX_YAML_BYTES + 1)


def read_yaml(path, root=None):
    """The one YAML document in the file at path (None when it is empty), read with PyYAML's
    safe loader but refusing, in one line naming the file: a file over MAX_YAML_BYTES, text
    that is not UTF-8 or not YAML, several documents, aliases that expand to more than
    MAX_YAML_VALUES values or refer to themselves, and nesting deeper than Python recurses.
    root: the data folder the file must not link out of (check_inside)."""
    import yaml

    path = Path(path)
    if root is not None:
        check_inside(root, path)
    try:
        data = _read_small(path)
    except OSError as exc:
        raise StageError(f"{path}: cannot read it ({exc.strerror}).") from None
    if len(data) > MAX_YAML_BYTES:
        raise StageError(f"{path}: over {MAX_YAML_BYTES >> 20} MiB, far more than such a YAML "
                         f"file holds; is it the right file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StageError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8.") \
            from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded(node)
        return loader.construct_document(node)
    except ValueError as exc:
        raise StageError(f"{path}: {exc}.") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = " ".join(" ".join(filter(None, (exc.context, exc.problem))).split())
        raise StageError(f"{path}: not valid YAML: {what}{where}.") from None
    except yaml.YAMLError as exc:
        raise StageError(f"{path}: not valid YAML: {' '.join(str(exc).split())}.") from None
    except RecursionError:
        raise StageError(f"{path}: nested too deeply to be a YAML file of this pipeline.") \
            from None
    finally:
        loader.dispose()


# A text annotation file (labels.csv, rec_gt.txt, a .jsonl, an OCR x.txt) may start with a
# UTF-8 byte-order mark (Excel's "CSV UTF-8" and Windows Notepad write one): it is dropped, as
# Python's utf-8-sig does. A UTF-16 or UTF-32 mark means another encoding: named, never guessed.
UTF8_BOM = b"\xef\xbb\xbf"
OTHER_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))  # UTF-32 LE before UTF-16 LE
BOM_HELD = "U+FEFF (a byte-order mark, left by joining files saved with one): remove it"


def other_encoding(data: bytes) -> str:
    """Why bytes that start with a UTF-16 or UTF-32 byte-order mark are not UTF-8 text ("" when
    they do not)."""
    for bom, name in OTHER_BOMS:
        if data.startswith(bom):
            return (f"it is {name} text (it starts with the byte-order mark "
                    f"{bom.hex(' ').upper()}); save it as UTF-8")
    return ""


def utf8_text(path, data: bytes) -> str:
    """data (the bytes of the text file at path) decoded as UTF-8 without a leading byte-order
    mark; StageError naming the file for UTF-16/32 or bytes that are not UTF-8."""
    why = other_encoding(data)
    if why:
        raise StageError(f"{path}: {why}.")
    try:
        return data.removeprefix(UTF8_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StageError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8.") \
            from None
