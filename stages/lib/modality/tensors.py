"""Stored samples to model input on a torch device: the float32 ops every modality shares.

torch is imported inside the function: the modalities' numpy paths never load it.
"""


def normalize_tensor(batch, mean, std):
    """normalize on a torch uint8 N x H x W x C batch on any device (train's device batches):
    the same three float32 ops element by element (so the same values), and for one channel
    the same strides (N x 1 x H x W over an N x H x W x 1 layout) as normalize gives."""
    import torch

    n, h, w, c = batch.shape
    dev = batch.device
    mean = torch.tensor(mean, dtype=torch.float32).to(dev)
    std = torch.tensor(std, dtype=torch.float32).to(dev)
    if c == 1:
        x = batch.float().div_(255.0).sub_(mean).div_(std)
        return x.permute(0, 3, 1, 2)
    x = batch.permute(0, 3, 1, 2).float().contiguous()
    return x.div_(255.0).sub_(mean.reshape(1, -1, 1, 1)).div_(std.reshape(1, -1, 1, 1))
