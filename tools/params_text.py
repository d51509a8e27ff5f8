"""Set values in params.yaml's text, keeping its comments, order and alignment (tools.init).

params.yaml is flat: top-level keys (`task: ...`) and sections of `  key: value  # comment`
lines, values in YAML flow style, comments that may run on in comment-only lines below. A value
is replaced in its line; the comment keeps its column when the new value fits before it. A key
the file lacks is added at the end of its section (a section it lacks, at the end of the file).
The result is read back and must hold exactly the values asked for, with everything else as it
was: anything this cannot edit so is an error, never a silently different file. `remove` takes
keys out (a key of another modality's projects), with the comment lines that run on below it.
"""
import re
from collections import Counter

import yaml

TOP = re.compile(r"^([A-Za-z_]\w*):(.*)$")
NESTED = re.compile(r"^(  )([A-Za-z_]\w*):(.*)$")


def render(value) -> str:
    """A value in YAML flow style, as one line (a string is quoted only where YAML needs it)."""
    text = yaml.safe_dump([value], default_flow_style=True, width=1 << 20,
                          allow_unicode=True, sort_keys=False).strip()
    return text[1:-1]  # out of its one-item list: no document-end marker for a scalar


def split_comment(rest: str) -> tuple[str, str]:
    """(value text, comment from its `#`, or "") of what follows `key:` on a line."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[:i], rest[i:]
    return rest, ""


def set_line(line: str, head: str, value, column: int) -> str:
    """`head` (indent, key and colon) with the new value and the line's comment, at the
    comment's own column, or at `column` (the file's) where an earlier, longer value had
    pushed it right; one space after the value when it does not fit."""
    rest = line[len(head):].rstrip("\n")
    old, comment = split_comment(rest)
    text = f"{head} {render(value)}"
    if comment:
        at = len(head) + len(old)  # where the comment starts now
        pushed = at > column and not old.endswith("  ")
        at = column if pushed else at
        text = (text.ljust(at) if len(text) < at else text + " ") + comment
    return text + "\n"


def comment_column(lines: list) -> int:
    """The column most of the lines' inline comments start at."""
    columns = Counter()
    for line in lines:
        match = TOP.match(line) or NESTED.match(line)
        if match:
            old, comment = split_comment(match.group(match.lastindex))
            if comment and old.strip():
                line = line.rstrip("\n")
                columns[len(line) - len(match.group(match.lastindex)) + len(old)] += 1
    return columns.most_common(1)[0][0] if columns else 0


def edit(text: str, values: dict) -> str:
    """text with {"task": ..., "section.key": value, ...} set (see the module doc)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    column = comment_column(lines)
    for dotted, value in values.items():
        section, _, key = dotted.rpartition(".")
        lines = set_value(lines, section, key, value, column)
    out = "".join(lines)
    check(text, out, values)
    return out


def value_end(lines: list, i: int, indent: int) -> int:
    """The index after the value that starts on line i: a block-style value (`key:` then
    `  - item` lines, or a deeper mapping, as yaml.safe_dump writes lists) runs on over its
    more-indented lines and its `- ` items at the key's indent; comment lines stay."""
    j = i + 1
    while j < len(lines):
        stripped = lines[j].lstrip(" ")
        depth = len(lines[j]) - len(stripped)
        if not stripped.strip() or stripped.startswith("#") or not (
                depth > indent or depth == indent and stripped.startswith("- ")):
            break
        j += 1
    return j


def set_value(lines: list, section: str, key: str, value, column: int) -> list:
    current, end = None, None  # the section being read; the index after its last line
    for i, line in enumerate(lines):
        top = TOP.match(line)
        if top:
            current = top.group(1)
            if not section and current == key:
                return [*lines[:i], set_line(line, f"{key}:", value, column),
                        *lines[value_end(lines, i, 0):]]
            continue
        nested = NESTED.match(line)
        if current == section and section:
            if nested and nested.group(2) == key:
                head = f"  {key}:"
                return [*lines[:i], set_line(line, head, value, column),
                        *lines[value_end(lines, i, 2):]]
            if line.strip():
                end = i + 1
    if not section:
        return [f"{key}: {render(value)}\n", *lines]
    if end is None:  # no such section (or an empty one): at the end of the file
        return [*lines, f"{section}:\n", f"  {key}: {render(value)}\n"]
    return [*lines[:end], f"  {key}: {render(value)}\n", *lines[end:]]


def flat(params: dict) -> dict:
    """{"task": ..., "section.key": value} of a params mapping."""
    return {f"{s}.{k}" if isinstance(v, dict) else s: x
            for s, v in params.items() for k, x in (v.items() if isinstance(v, dict) else [(s, v)])}


def check(before: str, after: str, values: dict) -> None:
    """after must read as before with `values` set, and nothing else changed."""
    expected = {**flat(yaml.safe_load(before) or {}), **values}
    try:
        got = flat(yaml.safe_load(after) or {})
    except yaml.YAMLError as exc:
        raise ValueError(f"params.yaml could not be edited in place: the result would not "
                         f"read as YAML ({exc})") from None
    wrong = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    if wrong:
        raise ValueError(f"params.yaml could not be edited in place: {', '.join(wrong)} would "
                         f"read back differently")


def remove(text: str, keys) -> str:
    """text without the dotted section keys (and their comments' run-on lines); a key the
    text lacks is no error."""
    lines = text.splitlines(keepends=True)
    for dotted in keys:
        section, _, key = dotted.rpartition(".")
        current = None
        for i, line in enumerate(lines):
            top = TOP.match(line)
            if top:
                current = top.group(1)
                continue
            nested = NESTED.match(line)
            if current == section and nested and nested.group(2) == key:
                end = value_end(lines, i, 2)
                while end < len(lines) and lines[end].lstrip(" ").startswith("#") and (
                        len(lines[end]) - len(lines[end].lstrip(" ")) > 2):
                    end += 1  # the comment's run-on lines
                lines = [*lines[:i], *lines[end:]]
                break
    out = "".join(lines)
    before = flat(yaml.safe_load(text) or {})
    expected = {k: v for k, v in before.items() if k not in set(keys)}
    if flat(yaml.safe_load(out) or {}) != expected:
        raise ValueError(f"params.yaml could not be edited in place: removing "
                         f"{', '.join(keys)} would change other keys")
    return out
