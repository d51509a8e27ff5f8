"""Image classification: one class per image (ImageFolder or labels.csv); the single-label
family's cross-entropy, accuracy and per-class scores and top-k predictions
(stages/tasks/common/singlelabel/)."""
from stages.tasks.classification import annotations
from stages.tasks.common.singlelabel import SingleLabel


class Classification(SingleLabel):
    name = "classification"
    letterbox = False  # prepare.letterbox may be set: a class does not move with pixels
    layouts = ("an ImageFolder tree <source>/<class>/<image> (or <source>/<split>/<class>/"
               "<image>, split train, val or test), or <source>/labels.csv with path,label")
    revisit = (
        ("train.epochs", "15, with batch_size 32 and lr 0.003, suits the 1,797 digits; more "
                         "images need fewer epochs, fewer images more"),
        ("train.model", "small_cnn; resnet18 (or train.init_from with pretrained weights) "
                        "for photos larger than 64 px"),
        ("train.aug_hflip", "off (digits are not symmetric); 0.5 when a mirrored image is "
                            "still its class, as most photos are"),
        ("validate.classes", "[] accepts any folder as a class: list yours, so a typo'd "
                             "folder stops the gate"),
        ("validate.on_error", "fail stops on the first bad file; quarantine trains without "
                              "them and lists them"),
    )
    models = ("small_cnn",)  # or a torchvision classifier by name (model_problem)

    def model_problem(self, name, others):
        """small_cnn or any torchvision classifier: only another task's model is refused
        here (an unknown name fails in train, which asks torchvision without slowing down
        every stage's start)."""
        owner = next((t.name for t in others if name in t.models), "")
        if name in self.models or not owner:
            return ""
        return (f"train.model: {name!r} is a {owner} model; classification builds small_cnn "
                f"(its default) or a torchvision classifier such as resnet18")

    def sample(self, p):
        from stages.tasks.classification.sample import digit_images

        return digit_images(p.per_class)

    def read_annotations(self, source, listing, settings):
        return annotations.read_annotations(source, listing)

    def layout(self, found):
        return annotations.layout(found)

    def build_model(self, name, meta):
        from stages.tasks.classification.model import build_model

        return build_model(name, len(meta["classes"]), meta["channels"])

    def subset_annotations(self, source, dest, found, chosen):
        annotations.write_subset_labels(source, dest, found, chosen)


TASK = Classification()
