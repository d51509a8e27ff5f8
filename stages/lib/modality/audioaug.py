"""The audio modality's default augmentation: the room and the microphone (audioroom.py:
speed, pitch, reverberation, gain, noise, band-limiting, telephone; all off by default), then
SpecAugment (Park et al. 2019), time and frequency masks on one normalised log-mel input, a
pure function of its seed (stages/lib/train/augment.py seeds it from seed, epoch and index, as
every augmentation).

train's keys (stages/lib/params.py): aug_time_mask (the widest time mask, in frames; 0 =
off), aug_freq_mask (the widest frequency mask, in mel bands; 0 = off), aug_masks (masks of
each kind), aug_freq_shift (every band moved up or down by up to this many bands, the edge
band repeated: a cheap stand-in for another speaker's vocal tract); read with defaults of
off, so a train section without them augments nothing.
Masked cells take the input's mean (per-clip: the masks never leak a constant the model
could key on). torch is imported inside the function.
"""


def knobs(p) -> tuple[int, int, int, int]:
    """train's SpecAugment params: (time mask width, frequency mask width, masks of each kind,
    band shift)."""
    return (int(getattr(p, "aug_time_mask", 0)), int(getattr(p, "aug_freq_mask", 0)),
            int(getattr(p, "aug_masks", 2)), int(getattr(p, "aug_freq_shift", 0)))


def augment(x, p, seed: int):
    """Augment one normalised 1 x n_mels x frames float tensor: the room and microphone
    effects (audioroom.py: its own generator), then SpecAugment masks.

    Four uniform numbers are drawn per mask, always the same count in the same order, then
    one for the shift, so switching one kind on or off never shifts the other's draws."""
    import torch

    from stages.lib.modality import audioroom

    x = audioroom.augment(x, p, seed)
    time_w, freq_w, masks, shift = knobs(p)
    if not (time_w or freq_w or shift) or masks < 0:
        return x
    u = torch.rand(4 * masks + 1, generator=torch.Generator().manual_seed(seed),
                   dtype=torch.float64).tolist()
    _, bands, frames = x.shape
    x = x.clone()
    fill = x.mean()
    if shift:  # the last draw: every band moved up or down by up to `shift` bands
        s = int(u[-1] * (2 * shift + 1)) - shift
        if s > 0:
            x = torch.cat([x[:, :1].expand(-1, s, -1), x[:, :bands - s]], dim=1)
        elif s < 0:
            x = torch.cat([x[:, -s:], x[:, -1:].expand(-1, -s, -1)], dim=1)
    for m in range(masks):
        a, b, c, d = u[4 * m:4 * m + 4]
        if time_w:
            w = int(a * (time_w + 1))
            t0 = int(b * (frames - w + 1))
            x[:, :, t0:t0 + w] = fill
        if freq_w:
            w = int(c * (freq_w + 1))
            f0 = int(d * (bands - w + 1))
            x[:, f0:f0 + w, :] = fill
    return x


def augment_batch(x, p, seeds):
    """augment() of every clip of x (N x 1 x n_mels x frames, normalised, on any device) as
    batched tensor ops: each clip's numbers drawn exactly as augment draws them (a CPU
    generator seeded by its (seed, epoch, index) seed), then one gather for the band shift and
    one masked fill for all masks. The same values as augment, clip by clip: the shift and the
    masks copy or fill values, and each clip's fill is its own mean, taken before the shift."""
    import torch

    from stages.lib.modality import audioroom

    if audioroom.active(p):  # clip by clip, on the CPU (audioroom.augment)
        x = torch.stack([audioroom.augment(xi, p, int(s)) for xi, s in zip(x, seeds,
                                                                            strict=True)])
    time_w, freq_w, masks, shift = knobs(p)
    if not (time_w or freq_w or shift) or masks < 0:
        return x
    n, _, bands, frames = x.shape
    u = torch.stack([torch.rand(4 * masks + 1, generator=torch.Generator().manual_seed(int(s)),
                                dtype=torch.float64) for s in seeds])
    fill = torch.stack([xi.mean() for xi in x])  # per clip, as augment takes it
    if shift:
        s = ((u[:, -1] * (2 * shift + 1)).long() - shift).to(x.device)
        rows = (torch.arange(bands, device=x.device)[None] - s[:, None]).clamp(0, bands - 1)
        x = x.gather(2, rows[:, None, :, None].expand(-1, x.shape[1], -1, frames))
    hit = torch.zeros(n, bands, frames, dtype=torch.bool, device=x.device)
    t = torch.arange(frames, device=x.device)[None]
    f = torch.arange(bands, device=x.device)[None]
    for m in range(masks):
        a, b, c, d = (u[:, 4 * m + k] for k in range(4))
        if time_w:
            w = (a * (time_w + 1)).long()
            t0 = (b * (frames - w + 1)).long()
            w, t0 = w.to(x.device)[:, None], t0.to(x.device)[:, None]
            hit |= ((t >= t0) & (t < t0 + w))[:, None, :]
        if freq_w:
            w = (c * (freq_w + 1)).long()
            f0 = (d * (bands - w + 1)).long()
            w, f0 = w.to(x.device)[:, None], f0.to(x.device)[:, None]
            hit |= ((f >= f0) & (f < f0 + w))[:, :, None]
    return torch.where(hit[:, None], fill[:, None, None, None].to(x.dtype), x)
