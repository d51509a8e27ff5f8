"""torchvision's detectors by name (train.model), behind the same seams as centernet_small.

Built with `weights=None, weights_backbone=None`: nothing is downloaded; bring weights with
train.init_from (a torchvision state dict loads under the wrapper's `detector.` prefix,
stages/lib/model/models.py align_names). The wrapper makes them look like our own detector:

- input: the pipeline's normalised N x 3 x S x S batch. torchvision's own transform is set to
  neither normalise again (mean 0, std 1) nor resize (its size is S: prepare.image_size);
- train mode: `forward(x, targets)` with our N x M x 5 [class, x1, y1, x2, y2] targets (class
  -1: padding) returns torchvision's dict of losses; the shared loop's forward_loss
  (stages/lib/model/models.py) sees `takes_targets` and sums it, so the loop (DDP, AMP,
  accumulation, resume) runs them unchanged;
- eval mode: N x TOP_K x 6 [x1, y1, x2, y2, score, class] rows, best first, padded with
  score -1 rows: what evaluate, export, predict, serve and the parity gate consume.

Export: torchvision's detectors trace (`dynamo=False`, opset 17) at a fixed batch size of 1 (the
images of a batch are a Python list in their forward: `export_batch`, read by
stages/lib/model/models.py); the ONNX runners feed such a graph one image at a time
(stages/lib/model/formats.py onnx_runner, tools/inference.py).

Fine-tuning: the head is the class/box predictor (`head_module`), LoRA adapts the backbone
(`lora_patterns`); Detection.head and lora_targets read them off the model.
"""
import torch
from torch import nn

TOP_K = 64  # rows per image, as centernet_small
SCORE_FLOOR = 0.001  # detections below this are dropped inside the model (evaluate's MIN_SCORE)
PAD_SCORE = -1.0  # a padding row: below every score threshold

# name: its keyword arguments for the score floor and K detections
DETECTORS = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": {"box_score_thresh": SCORE_FLOOR,
                                              "box_detections_per_img": TOP_K},
    "ssdlite320_mobilenet_v3_large": {"score_thresh": SCORE_FLOOR, "detections_per_img": TOP_K},
    "fcos_resnet50_fpn": {"score_thresh": SCORE_FLOOR, "detections_per_img": TOP_K},
    "retinanet_resnet50_fpn": {"score_thresh": SCORE_FLOOR, "detections_per_img": TOP_K},
}
# softmax heads with a background class 0 (our class c is their label c + 1); FCOS and
# RetinaNet score each class with a sigmoid and have none (label c is our class c)
BACKGROUND = {"fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large"}


def build(name: str, num_classes: int, image_size: int):
    """torchvision's `name` for num_classes classes (+ a background class where it has
    one) at image_size."""
    from torchvision.models import detection
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    kwargs = {**DETECTORS[name], "num_classes": num_classes + (name in BACKGROUND)}
    identity = {"image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0]}
    if name.startswith("ssd"):  # a fixed 320 x 320 resize inside: replaced below
        net = getattr(detection, name)(weights=None, weights_backbone=None, **kwargs,
                                       **identity)
        net.transform = GeneralizedRCNNTransform(image_size, image_size, **identity,
                                                 size_divisible=1,
                                                 fixed_size=(image_size, image_size))
    else:
        net = getattr(detection, name)(weights=None, weights_backbone=None,
                                       min_size=image_size, max_size=image_size, **kwargs,
                                       **identity)
    return net


class TorchvisionDetector(nn.Module):
    # stages/lib/model/models.py forward_loss: model(x, targets), losses summed
    takes_targets = True
    export_batch = 1  # traced at batch 1 (stages/lib/model/models.py export_batch)
    lora_patterns = ("detector.backbone*",)  # what train.lora_targets: [] adapts

    def __init__(self, name: str, num_classes: int, image_size: int, top_k: int = TOP_K):
        super().__init__()
        self.name, self.num_classes, self.top_k = name, num_classes, top_k
        self.offset = int(name in BACKGROUND)  # torchvision's label of our class 0
        self.detector = build(name, num_classes, image_size)

    @property
    def head_module(self) -> str:
        """The module fine-tuning re-initialises and keeps trainable: the class/box predictor."""
        return "detector.roi_heads.box_predictor" if "rcnn" in self.name else "detector.head"

    def forward(self, x, targets=None):
        images = list(x.unbind(0))
        if self.training:
            return self.detector(images, torchvision_targets(targets, self.offset))
        return torch.stack([rows(d, self.top_k, self.offset) for d in self.detector(images)])


def torchvision_targets(targets, offset: int = 1) -> list[dict]:
    """Our N x M x 5 boxes -> torchvision's [{boxes: M' x 4, labels: M'}] per image: padding
    and degenerate boxes (no width or height: torchvision refuses them) left out, class c
    becoming label c + offset (1 where torchvision's label 0 is the background)."""
    out = []
    for t in targets:
        keep = (t[:, 0] >= 0) & (t[:, 3] > t[:, 1]) & (t[:, 4] > t[:, 2])
        out.append({"boxes": t[keep, 1:5].float(), "labels": t[keep, 0].long() + offset})
    return out


def rows(found: dict, top_k: int, offset: int = 1):
    """One image's torchvision detections (best first) as top_k x 6 rows, padded."""
    boxes, scores, labels = found["boxes"], found["scores"], found["labels"]
    real = torch.cat([boxes, scores[:, None], (labels - offset).to(boxes.dtype)[:, None]], 1)
    pad = real.new_zeros(top_k, 6)
    pad[:, 4] = PAD_SCORE
    return torch.cat([real, pad])[:top_k]
