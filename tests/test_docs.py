"""Issue 29: the README stays short, and every relative link of the README and the docs pages
leads somewhere: an existing file, and the heading named by its anchor."""
import re
from pathlib import Path

from tests.conftest import ROOT

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).*?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, code spans blanked out."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text as rendered (code marks, link targets and
    emphasis dropped), lower case, punctuation removed, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (a repeated one gets -1, -2, ... as on GitHub)."""
    text = path.read_text()
    written = text.splitlines()
    seen: dict[str, int] = {}
    out = set()
    for n, line in prose(text):
        if HEADING.match(line):  # then slug the heading as written, code marks and all
            base = slug(HEADING.match(written[n - 1]).group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in prose(path.read_text()) for m in LINK.finditer(line)]


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(root)}:{n}: ({target})"
        if not dest.exists():
            problems.append(f"{where} no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            problems.append(f"{where} no heading #{anchor} in {dest.relative_to(root)}")
    return problems


def test_the_readme_is_at_most_250_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move the detail to docs/"


def test_every_relative_link_leads_to_a_file_and_a_heading():
    every = [problem for page in pages() for problem in broken_links(page)]
    assert not every, "broken links:\n" + "\n".join(every)
    # the README links every docs page, and the pages are linked at all
    readme = {(ROOT / t.partition("#")[0]).resolve() for _, t in links(ROOT / "README.md")}
    assert {p.resolve() for p in pages()[1:]} <= readme, "a docs page the README does not list"


def test_the_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Width buckets: `prepare.width_buckets`\n"
                                       "## Same\n## Same\n")
    page.write_text("# Page\n\n[ok](other.md#width-buckets-preparewidth_buckets) "
                    "[twice](other.md#same-1) [self](#page) [web](https://example.org)\n"
                    "[gone](missing.md) [no heading](other.md#nowhere)\n"
                    "`[in code](missing.md)`\n\n```\n[in a block](missing.md)\n```\n")
    assert broken_links(page, root=tmp_path) == ["page.md:4: (missing.md) no such file",
                        "page.md:4: (other.md#nowhere) no heading #nowhere in other.md"]


def command_lines(path: Path) -> list[str]:
    """The command lines of a page's bash code blocks."""
    out, fenced, lang = [], False, ""
    for line in path.read_text().splitlines():
        m = FENCE.match(line)
        if m:
            fenced, lang = not fenced, line.strip()[3:].strip()
            continue
        if fenced and lang == "bash" and line.strip() and not line.startswith("#"):
            out.append(line.strip())
    return out


def test_every_command_block_of_the_gpu_page_names_real_modules_options_and_files(
        tmp_path, monkeypatch):
    """docs/gpu.md's commands: each `python -m MODULE ARGS` parses with that module's own
    click command (options exist, values are accepted; nothing runs; the input files a
    command names, such as have.txt, stand in empty), each script exists."""
    import importlib
    import shlex

    monkeypatch.chdir(tmp_path)
    (tmp_path / "have.txt").write_text("")
    lines = command_lines(ROOT / "docs/gpu.md")
    assert any("bench.gpu_busy" in line for line in lines)
    for line in lines:
        words = [w for w in shlex.split(line) if "=" not in w or w.startswith("-")]
        if words[:2] == ["python", "-m"]:
            command = importlib.import_module(words[2]).main
            command.make_context(words[2], words[3:])  # raises on an unknown option
        else:
            assert words[0] == "bash" and (ROOT / words[1]).is_file(), line
