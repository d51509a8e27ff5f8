"""A first-time user's own dataset (issue 17): 3 classes of 48x48 RGB images that differ only
in colour (the same grey level), as PNGs plus two JPEGs and one corrupt file.

Each class's images hold a 16x16 square of the class colour at a seeded position on grey noise;
the three colours have the same luminance (Pillow's L), so at the digits' defaults (16x16 grey)
the classes look alike and only an RGB model tells them apart."""
from pathlib import Path

import numpy as np
from PIL import Image

COLOURS = {"red": (200, 100, 100), "green": (100, 151, 100), "blue": (100, 121, 255)}


def own_dataset(root, per_class: int = 30, size: int = 48) -> Path:
    root = Path(root)
    for c, (name, colour) in enumerate(COLOURS.items()):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            rng = np.random.default_rng([c, i])
            grey = rng.integers(90, 170, (size, size, 1), dtype=np.uint8)
            x = np.repeat(grey, 3, axis=2)
            top, left = rng.integers(0, size - 16, 2)
            x[top:top + 16, left:left + 16] = colour
            fmt = "JPEG" if c == 0 and i < 2 else "PNG"
            ext = "jpg" if fmt == "JPEG" else "png"
            Image.fromarray(x, "RGB").save(root / name / f"{name}_{i:03d}.{ext}", format=fmt,
                                           **({"quality": 95} if fmt == "JPEG" else {}))
    (root / "blue" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return root
