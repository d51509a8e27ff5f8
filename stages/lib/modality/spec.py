"""The input recipe a model carries, as it is stored: the one place its keys are spelt.

Each modality owns its input spec (stages/lib/modality/imagespec.py ImageSpec,
audiospec.py AudioSpec): what prepare makes of a file and what every consumer (train, evaluate,
export, predict, serve) feeds the model. It is stored under these keys in data/processed/
meta.json, a model's metadata (model.pt, the ONNX and TorchScript metadata) and a loaded
model: the size under SIZE (an image's pixels per side or [height, width]; a sound's log-mel
settings, a mapping), its channels, mean and std, and the letterbox where a model records
one. The stored names and their order are part of the outs' bytes: they never change.
"""

SIZE = "image_size"  # the stored name of the spec's size (every modality's, for the outs' bytes)
RECIPE = (SIZE, "channels", "mean", "std")  # the stored recipe, in its order
LETTERBOX = "letterbox"  # recorded where prepare.letterbox is on, and always for detection


def recipe_keys(meta) -> tuple:
    """The recipe's stored keys of meta (a model's or meta.json's): RECIPE, and the letterbox
    where meta records one."""
    return (*RECIPE, *((LETTERBOX,) if LETTERBOX in meta else ()))


def recipe(meta) -> dict:
    """{key: value} of meta's stored recipe (recipe_keys), in its order."""
    return {k: meta[k] for k in recipe_keys(meta)}
AUTO = "auto"  # a prepare setting chosen from the data by prepare (params.yaml's word for it)
SHAPE = (SIZE, "channels", LETTERBOX)  # what a stored sample's layout depends on


def shape_of(meta) -> dict:
    """{key: value} of what meta's stored samples look like (SHAPE; None where absent): two
    models fed the same stored samples agree on it."""
    return {k: meta.get(k) for k in SHAPE}
