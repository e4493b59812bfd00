"""Probe builder: the 16-bit consumers as before Plan.hand_back (wait for every wgmma group at any depth)."""
import schedules
from schedules.transforms import wgmma

wgmma.LAG_FROM_STAGES = 99


def build(M, N, K, arch, config, dtype="fp32"):
    step, cfg = config
    return schedules.build(step, M, N, K, arch=arch, config=cfg, dtype=dtype)
