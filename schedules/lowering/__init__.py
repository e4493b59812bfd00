"""After TVM lowers a schedule: the ladder's own passes over the lowered kernel, and the CUDA
compile through NVRTC.

    pipelines.py     TVM's TIR pipeline with the ladder's device passes after ThreadSync
    one_barrier.py   one barrier per k slice where a config asks (steps 13-14)
    long_k.py        a second accumulator where an fp32 sum runs over a long K
    fp32_fallback.py fp32 for the outputs 3xTF32 cannot be trusted with (steps 14, 19)
    nvrtc.py         NVRTC pointed at the CUDA wheels' headers; subnormals kept; a precompiled header

The bottom of schedules/: nothing here imports a transform, a rung or the registry.
"""
