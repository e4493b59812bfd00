"""python -m steps.rpc_pool: TVM's RPC tracker and one rpc_server per GPU, for tuning on every GPU.

The command is steps/commands/rpc_pool.py; see `python -m steps.rpc_pool --help`.
"""

from .commands.rpc_pool import main

if __name__ == "__main__":
    raise SystemExit(main())
