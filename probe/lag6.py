"""Probe builder: the 16-bit consumers with a wgmma group in flight from 6 stages."""
import schedules
from schedules.transforms import wgmma

wgmma.LAG_FROM_STAGES = 6


def build(M, N, K, arch, config, dtype="fp32"):
    step, cfg = config
    return schedules.build(step, M, N, K, arch=arch, config=cfg, dtype=dtype)
