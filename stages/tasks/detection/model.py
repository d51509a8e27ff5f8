"""The detector: a small anchor-free CenterNet of our own (plain PyTorch), trained from scratch.

A compact conv backbone (strides 2 to 32) with a light FPN back up to stride 4; the head
predicts per class a centre heatmap, and per cell the box size and the centre's sub-cell offset.
In train mode the forward returns the raw maps (N x (C + 4) x H/4 x W/4) for the loss; in eval
mode it decodes them in the graph (3x3 max-pool peaks, top-K): N x K x 6 rows
[x1, y1, x2, y2, score, class] in input pixels, which is what evaluate, the ONNX export, predict
and serve all consume.
"""
import torch
from torch import nn
from torch.nn import functional as F

CENTERNET = "centernet_small"
# our CenterNet's sizes by name: backbone widths (strides 2 to 32), FPN and head channels
CENTERNETS = {
    "centernet_small": {"widths": (16, 32, 64, 96, 128), "neck": 32, "head": 48},
    "centernet_medium": {"widths": (24, 48, 96, 160, 256), "neck": 64, "head": 64},
}
STRIDE = 4
TOP_K = 64


def conv(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class CenterNet(nn.Module):
    """Most of the work is at strides 8 to 32: at stride 4 (a 40 x 40 grid at 160 px) there is
    one strided conv in the backbone, the FPN's 1x1 lateral (no smoothing conv) and the head's
    one 3x3 conv. Those stride-4 layers cost about half the train step in the first version
    (two convs in stage 2, a smoothing conv, a 64-channel head); this one is about 1.3x faster
    (docs/benchmarks.md)."""

    head_module = "head"  # a conv block and the 1x1 conv to C heatmaps + 4 box maps
    lora_patterns = ("stem", "c2", "c3", "c4", "c5", "lat", "smooth")  # backbone and FPN neck

    def __init__(self, num_classes: int, channels: int = 3, widths=(16, 32, 64, 96, 128),
                 neck: int = 32, head: int = 48, top_k: int = TOP_K):
        super().__init__()
        w1, w2, w3, w4, w5 = widths
        self.num_classes, self.top_k = num_classes, top_k
        self.stem = conv(channels, w1, 2)  # /2
        self.c2 = conv(w1, w2, 2)  # /4
        self.c3 = nn.Sequential(conv(w2, w3, 2), conv(w3, w3))  # /8
        self.c4 = nn.Sequential(conv(w3, w4, 2), conv(w4, w4))  # /16
        self.c5 = nn.Sequential(conv(w4, w5, 2), conv(w5, w5), conv(w5, w5))  # /32
        self.lat = nn.ModuleList([nn.Conv2d(c, neck, 1) for c in (w2, w3, w4, w5)])
        self.smooth = nn.ModuleList([conv(neck, neck) for _ in range(2)])  # strides 8, 16
        self.head = nn.Sequential(conv(neck, head), nn.Conv2d(head, num_classes + 4, 1))
        with torch.no_grad():  # heatmap prior 0.01: a stable focal loss start
            self.head[-1].bias[:num_classes] = -4.6

    def maps(self, x):
        c2 = self.c2(self.stem(x))
        c3 = self.c3(c2)
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        p = self.lat[3](c5)
        for level, feat in ((2, c4), (1, c3), (0, c2)):
            p = F.interpolate(p, size=feat.shape[-2:], mode="nearest") + self.lat[level](feat)
            if level:  # stride 4: the head's 3x3 conv smooths
                p = self.smooth[level - 1](p)
        return self.head(p)

    def forward(self, x):
        out = self.maps(x)
        return out if self.training else decode_maps(out, self.num_classes, self.top_k)


def decode_maps(out, num_classes: int, top_k: int):
    """N x K x 6 [x1, y1, x2, y2, score, class] from the raw maps: heatmap peaks (a cell that
    is the maximum of its 3x3 neighbourhood), the K best over all classes."""
    n, _, h, w = out.shape
    heat = torch.sigmoid(out[:, :num_classes])
    peaks = heat * (F.max_pool2d(heat, 3, 1, 1) == heat).to(heat.dtype)
    scores, index = peaks.reshape(n, -1).topk(min(top_k, num_classes * h * w), dim=1)
    cls = torch.div(index, h * w, rounding_mode="floor")
    cell = index - cls * (h * w)
    cy = torch.div(cell, w, rounding_mode="floor")
    cx = cell - cy * w
    reg = out[:, num_classes:].reshape(n, 4, h * w)
    reg = torch.gather(reg, 2, cell[:, None, :].expand(n, 4, cell.shape[1]))
    size = F.relu(reg[:, :2]) * STRIDE  # width, height in pixels
    x = (cx.to(out.dtype) + reg[:, 2]) * STRIDE
    y = (cy.to(out.dtype) + reg[:, 3]) * STRIDE
    return torch.stack([x - size[:, 0] / 2, y - size[:, 1] / 2, x + size[:, 0] / 2,
                        y + size[:, 1] / 2, scores, cls.to(out.dtype)], 2)


def heatmap_targets(targets, num_classes: int, h: int, w: int):
    """Training targets from N x M x 5 boxes [class, x1, y1, x2, y2] in input pixels (class -1:
    padding): the N x C x h x w Gaussian heatmaps (1 at each centre cell, TTFNet's elliptical
    Gaussian), and per box its centre cell index, size and offset (stride units), and a mask."""
    cls = targets[..., 0]
    valid = cls >= 0
    x1, y1, x2, y2 = (targets[..., k] / STRIDE for k in range(1, 5))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    bw, bh = (x2 - x1).clamp(min=1e-3), (y2 - y1).clamp(min=1e-3)
    ix = cx.floor().clamp(0, w - 1)
    iy = cy.floor().clamp(0, h - 1)
    sx, sy = (0.54 * bw / 6).clamp(min=0.3), (0.54 * bh / 6).clamp(min=0.3)
    gx = torch.arange(w, dtype=targets.dtype, device=targets.device)
    gy = torch.arange(h, dtype=targets.dtype, device=targets.device)
    g = torch.exp(-((gx[None, None, None, :] - ix[..., None, None]) ** 2
                    / (2 * sx[..., None, None] ** 2)
                    + (gy[None, None, :, None] - iy[..., None, None]) ** 2
                    / (2 * sy[..., None, None] ** 2)))  # N x M x h x w
    g = g * valid[..., None, None]
    onehot = F.one_hot(cls.clamp(min=0).long(), num_classes).to(g.dtype) * valid[..., None]
    heat = (g[:, :, None] * onehot[..., None, None]).amax(1) if g.shape[1] else \
        targets.new_zeros(len(targets), num_classes, h, w)
    index = (iy * w + ix).long()
    reg = torch.stack([bw, bh, cx - ix, cy - iy], 1)  # N x 4 x M
    return heat, index, reg, valid


def loss(outputs, targets, num_classes: int):
    """CenterNet's loss: penalty-reduced focal loss on the heatmaps, L1 on offset, and L1 (x0.1)
    plus a GIoU term on the box size, at the centre cells; normalised by the box count."""
    n, _, h, w = outputs.shape
    heat, index, reg, valid = heatmap_targets(targets.float(), num_classes, h, w)
    logits = outputs[:, :num_classes].float()
    pred = torch.sigmoid(logits).clamp(1e-4, 1 - 1e-4)
    pos = heat.eq(1).float()
    neg = (1 - heat) ** 4
    focal = -(torch.log(pred) * (1 - pred) ** 2 * pos
              + torch.log(1 - pred) * pred ** 2 * neg * (1 - pos)).sum()
    boxes = valid.sum().clamp(min=1)
    raw = outputs[:, num_classes:].float().reshape(n, 4, h * w)
    at = torch.gather(raw, 2, index[:, None, :].expand(n, 4, index.shape[1]))
    mask = valid[:, None, :].float()
    size_l1 = ((at[:, :2] - reg[:, :2]).abs() * mask).sum()
    off_l1 = ((at[:, 2:] - reg[:, 2:]).abs() * mask).sum()
    # GIoU of the decoded box against the truth, both around the truth's centre cell
    pw, ph = F.relu(at[:, 0]), F.relu(at[:, 1])
    px, py = at[:, 2], at[:, 3]
    tw, th, tx, ty = reg[:, 0], reg[:, 1], reg[:, 2], reg[:, 3]
    ix1, iy1 = torch.maximum(px - pw / 2, tx - tw / 2), torch.maximum(py - ph / 2, ty - th / 2)
    ix2, iy2 = torch.minimum(px + pw / 2, tx + tw / 2), torch.minimum(py + ph / 2, ty + th / 2)
    inter = (ix2 - ix1).clamp(min=0) * (iy2 - iy1).clamp(min=0)
    union = pw * ph + tw * th - inter
    ex1, ey1 = torch.minimum(px - pw / 2, tx - tw / 2), torch.minimum(py - ph / 2, ty - th / 2)
    ex2, ey2 = torch.maximum(px + pw / 2, tx + tw / 2), torch.maximum(py + ph / 2, ty + th / 2)
    enclose = (ex2 - ex1) * (ey2 - ey1)
    giou = inter / union.clamp(min=1e-6) - (enclose - union) / enclose.clamp(min=1e-6)
    giou_loss = ((1 - giou) * valid.float()).sum()
    return (focal + 0.1 * size_l1 + off_l1 + 2.0 * giou_loss) / boxes


def build_model(name: str, num_classes: int, channels: int, image_size: int = 160):
    """centernet_small (ours), or one of torchvision's detectors by name
    (torchvision_detectors.py: from scratch, 3 channels)."""
    from stages.tasks.detection.torchvision_detectors import DETECTORS, TorchvisionDetector

    if name in CENTERNETS:
        return CenterNet(num_classes, channels, **CENTERNETS[name])
    from stages.lib.io import StageError

    if name in DETECTORS:
        if channels != 3:
            raise StageError(f"train.model: {name} takes RGB images; set prepare.channels: 3 "
                             f"(it is {channels}).")
        return TorchvisionDetector(name, num_classes, int(image_size))
    raise StageError(f"train.model: {name!r} is not a detector this task knows; use "
                     f"{', '.join(map(repr, CENTERNETS))} (ours; {CENTERNET!r} is the "
                     f"default) or one of torchvision's: "
                     f"{', '.join(DETECTORS)}.")
