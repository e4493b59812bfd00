"""Which kernel of the fp32 block faults when replayed from a CUDA graph on the H200 (call 6: an
illegal address at 16 tokens, H200 fp32 rows picking steps 25 and 11). argv: TOKENS GRAPH(0/1)
SWAP: SWAP "none" keeps the H200 rows; "25to19" makes every step-25 pick step 19; "rows100" uses the
H100's rows. Runs steps.model's own measure once (its error check against float64 included)."""
import sys
import schedules
tokens, graph, swap = sys.argv[1].split(","), sys.argv[2] == "1", sys.argv[3]
choose = schedules.dispatch.choose
def patched(M, N, K, precision, arch, steps, gpu=None, doc=None, **kw):
    if swap == "rows100":
        gpu = None
    c = choose(M, N, K, precision, arch, steps, gpu, doc, **kw)
    if swap == "25to19" and c.step.number == 25:
        allow = kw.get("allow")
        c = choose(M, N, K, precision, arch, [s for s in steps if s.number != 25], gpu, doc, **kw)
    return c
schedules.dispatch.choose = patched
from steps.commands import model as command
args = ["--tokens", *tokens, "--rounds", "1", "--repeat", "3", "--seed", "1"] + (["--cuda-graph"] if graph else [])
print(f"tokens {tokens} graph {graph} swap {swap}", flush=True)
sys.exit(command.main(args))
