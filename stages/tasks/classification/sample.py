"""The built-in sample: scikit-learn's digits (1,797 real 8x8 grey images, 10 classes).

The images are binary PGM files written byte by byte here, not through an encoder, so their
bytes cannot depend on the zlib or Pillow build: every machine writes identical files.
"""


def pgm_bytes(pixels) -> bytes:
    """A binary greyscale PGM (P5) of a 2-D uint8 array."""
    h, w = pixels.shape
    return f"P5\n{w} {h}\n255\n".encode() + pixels.tobytes()


def digit_images(per_class: int = 0):
    """Yield (relative path <digit>/<index>.pgm, PGM bytes) for the digits, in a fixed order;
    per_class > 0 keeps the first N of each digit."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    counts = {}
    for index, (image, target) in enumerate(zip(digits.images, digits.target, strict=True)):
        label = str(int(target))
        counts[label] = counts.get(label, 0) + 1
        if per_class and counts[label] > per_class:
            continue
        pixels = np.round(image * 255.0 / 16.0).astype(np.uint8)  # digits are 0..16
        yield f"{label}/{index:04d}.pgm", pgm_bytes(pixels)
