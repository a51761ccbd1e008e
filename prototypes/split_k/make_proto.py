#!/usr/bin/env python3
"""Split-K prototype: rewrites rendered reduce_mma CUDA units (M = 1) so that gridDim.z
threadgroups share a tile's steps, each adding its partial row sums into an f32 y with
atomicAdd. Usage: make_proto.py OUT.cu NAME=UNIT.cu ... (units from examples/mma_unit)."""
import re, sys

out, units = sys.argv[1], sys.argv[2:]
header, kernels = None, []
for spec in units:
    name, path = spec.split("=", 1)
    src = open(path).read()
    head, body = src.split('extern "C" __global__', 1)
    header = header or head
    steps = int(re.search(r"step < (\d+)u; step \+=", body).group(1))
    body = re.sub(r"void reduce_mma_[0-9a-f]+\(", f"void {name}(", body, count=1)
    body = body.replace("bf16_t* __restrict__ y)", "float* __restrict__ y)")
    body = body.replace("// first sample of this slice",
        f"\n  const uint z0 = blockIdx.z * {steps}u / gridDim.z, z1 = (blockIdx.z + 1u) * {steps}u / gridDim.z;", 1)
    # Staging (M = 1: chunk q = i, 8 columns; 16 chunks per step): only this slice's steps.
    body = re.sub(r"for \(uint i = THREAD_IN_GROUP; i < (\d+)u; i \+= GROUP_THREADS\)",
                  "for (uint i = z0 * 16u + THREAD_IN_GROUP; i < z1 * 16u; i += GROUP_THREADS)", body)
    body = body.replace("u = part * 4u + (lane & 3u)", "u = (z0 + part) * 4u + (lane & 3u)")
    body = re.sub(r"for \(uint step = part, it = 1u; step < \d+u;",
                  "for (uint step = z0 + part, it = 1u; step < z1;", body)
    body = re.sub(r"if \(next_step < \d+u\)", "if (next_step < z1)", body)
    body, n = re.subn(r"y\[(\(ulong\)n \* \d+u \+ r)\] = from_f32<act_t>\((.*)\);\n",
                      r"atomicAdd(&y[\1], \2);\n", body)
    assert n == 1, name
    kernels.append('extern "C" __global__' + body)
open(out, "w").write(header + "\n".join(kernels))
