"""Where the ladder meets TVM and the world: everything here reads the registry, nothing below
reads this.

    ladder_rule.py     a dlight rule: a model's matmul functions scheduled by the ladder's steps
    relax_dispatch.py  a Relax pass: the written-out Hopper kernels placed in a model; the pipeline
    batched.py         batched products (attention) for the dlight rule
    references.py      TVM's own schedules as peers: dlight's default, MetaSchedule's replay
    device_check.py    a correctness check run on a remote server's own GPU (the RPC sweep)
"""
