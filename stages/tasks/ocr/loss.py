"""The CTC loss as train and validation compute it, deterministic on every device.

torch's CUDA CTC kernel has no deterministic backward (`ctc_loss_backward_gpu` raises under
`torch.use_deterministic_algorithms(True)`, train.deterministic's default). So when the logits
are on a CUDA device and deterministic algorithms are on, the loss is computed on the CPU: the
log-probabilities are copied over (a differentiable copy: the gradient comes back to the
device), and the CPU kernel, deterministic, does the rest. The lines are short (T x N x C is a
few hundred kB a batch), so the copy costs little. With train.deterministic false the CUDA
kernel runs where the logits are. On the CPU nothing moves.
"""


def ctc_loss(outputs, targets, reduction: str):
    """CTC of N x T x C logits (class 0 the blank) against targets N x (1 + L): the length,
    then the label codes. zero_infinity=True, deliberately: see the task's loss."""
    import torch
    import torch.nn.functional as F

    logp = outputs.float().log_softmax(-1).transpose(0, 1)  # T x N x C
    device = logp.device
    if device.type == "cuda" and torch.are_deterministic_algorithms_enabled():
        logp, targets = logp.cpu(), targets.cpu()
    lengths = targets[:, 0].long()
    frames = torch.full((outputs.shape[0],), outputs.shape[1], dtype=torch.long,
                        device=logp.device)
    loss = F.ctc_loss(logp, targets[:, 1:].long(), frames, lengths, blank=0,
                      reduction=reduction, zero_infinity=True)
    return loss.to(device)
