"""Helpers of bench/ocr_fonts.py: fonts picked by name from a folder (--fonts-dir), and the
Tesseract column (`tesseract --psm 7 -l eng` on the same test lines, CPU seconds per line).

Tesseract reads each line as a PNG written from the synthetic line at its natural width (not
the model's 32 x 192 fit), padded by `PAD` pixels of its own paper grey on every side (Tesseract
misreads glyphs that touch the border), upscaled `scale` times with Lanczos when scale > 1. On
the bench's 32-pixel lines (x-height near 12 px) upscaling did not help: 2x read the held-out
fonts as well as 1x and the seen ones worse, 3x worse on both (docs/benchmarks.md), so 1x is
the default.
All lines go to one `tesseract LIST stdout` process (the model is loaded once, as a service
would), one page per line separated by form feeds, with OMP_THREAD_LIMIT=1; its CPU time is
the child's user + sys (resource.getrusage(RUSAGE_CHILDREN)). tesseract_spawned also times one
process per line (the model loaded each time, as a shell loop over files would).
"""
import os
import resource
import shutil
import subprocess
from pathlib import Path

from stages.tasks.ocr.synth import FONT_SUFFIXES, find_fonts

PAD = 8
MISSING = ("tesseract: not found on PATH (install it: apt-get install tesseract-ocr); "
           "the Tesseract column is skipped")


def font_files(folder: Path) -> dict:
    """{stem: path} of the font files under folder (recursively, as tools.synth_ocr finds
    them). A stem found in several formats maps to the first of .ttf, .otf, .ttc, .pfb (Debian's
    URW fonts come as .otf and .pfb); found twice in the same format, to None (ambiguous: name
    it by its path under folder without suffix, e.g. opentype/urw-base35/C059-Roman)."""
    folder = Path(folder)
    rank = {s: i for i, s in enumerate(FONT_SUFFIXES)}
    best = {}
    for path in find_fonts(folder):
        key = (rank[path.suffix.lower()], path)
        best.setdefault(path.stem, []).append(key)
        rel = path.relative_to(folder).with_suffix("").as_posix()
        if rel != path.stem:
            best.setdefault(rel, []).append(key)
    out = {}
    for name, found in best.items():
        found.sort(key=lambda k: k[0])
        out[name] = None if len(found) > 1 and found[0][0] == found[1][0] else found[0][1]
    return out


def pick_fonts(folders, names) -> list:
    """[(name, path)] for each requested font (a file name without suffix, or its path under
    its folder without suffix), from one folder or several (a name found in two of them is
    ambiguous), or a ValueError naming the missing ones and what the folders have."""
    folders = [Path(folders)] if isinstance(folders, (str, Path)) else [Path(f) for f in folders]
    found = {}
    for folder in folders:
        for name, path in font_files(folder).items():
            found[name] = None if name in found else path
    missing = [n for n in names if found.get(n) is None]
    if missing:
        why = "; ".join(f"{n}: {'found twice' if n in found else 'not found'}" for n in missing)
        stems = sorted(k for k, v in found.items()  # an ambiguous stem: by its paths
                       if v and ("/" not in k or found.get(k.rsplit("/", 1)[1]) is None))
        have = ", ".join(stems[:40])
        where = " ".join(str(f) for f in folders)
        raise ValueError(f"--fonts-dir {where}: {why} (it has {len(stems)} fonts: {have}"
                         f"{', ...' if len(stems) > 40 else ''})")
    return [(n, found[n]) for n in names]


def line_png(pixels, path: Path, scale: int) -> None:
    import numpy as np
    from PIL import Image

    paper = int(np.median(np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])))
    padded = np.pad(pixels, PAD, constant_values=paper)
    img = Image.fromarray(padded)
    if scale != 1:
        img = img.resize((img.size[0] * scale, img.size[1] * scale), Image.Resampling.LANCZOS)
    img.save(path)


def tesseract(lines, workdir: Path, scale: int = 1, binary: str = "tesseract"):
    """(texts, CPU seconds per line) of Tesseract on the uint8 grey lines, or None when the
    binary is missing (the caller prints MISSING)."""
    exe = shutil.which(binary)
    if exe is None:
        return None
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, pixels in enumerate(lines):
        paths.append(workdir / f"line{i:05d}.png")
        line_png(pixels, paths[-1], scale)
    (workdir / "list.txt").write_text("".join(f"{p}\n" for p in paths))
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([exe, str(workdir / "list.txt"), "stdout", "--psm", "7", "-l", "eng"],
                          capture_output=True, text=True, env=env, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"tesseract exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    pages = proc.stdout.split("\f")
    if pages and not pages[-1].strip():
        pages = pages[:-1]
    if len(pages) != len(paths):
        raise RuntimeError(f"tesseract gave {len(pages)} pages for {len(paths)} lines")
    return [" ".join(p.split()) for p in pages], cpu_s(before, after) / max(len(paths), 1)


def cpu_s(before, after) -> float:
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tesseract_spawned(workdir: Path, n: int, binary: str = "tesseract") -> float:
    """CPU seconds per line of one `tesseract IMAGE stdout --psm 7 -l eng` process per line
    (the model loaded for every line, as a shell loop over files would), over the first n PNGs
    that tesseract() wrote to workdir."""
    exe = shutil.which(binary)
    paths = sorted(Path(workdir).glob("line*.png"))[:n]
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for path in paths:
        subprocess.run([exe, str(path), "stdout", "--psm", "7", "-l", "eng"],
                       capture_output=True, env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return cpu_s(before, after) / max(len(paths), 1)
