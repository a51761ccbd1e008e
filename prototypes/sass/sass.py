#!/usr/bin/env python3
"""Compile a CUDA unit (file or stdin) with NVRTC for sm_90 and the backend's flags,
disassemble it, print the opcode histogram. SASS_DUMP=path keeps the disassembly.
NVRTC and nvdisasm come from the pip wheels (see README.md): CUDA_WHEELS=/opt/cu."""
import ctypes, sys, subprocess, re, collections, tempfile, os
root = os.environ.get("CUDA_WHEELS", "/opt/cu")
# CUDA 13 (the wheel CI installs, the device's major version) first, else the CUDA 12 wheel.
_libs = [f"{root}/nvidia/cu13/lib/libnvrtc.so.13", f"{root}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"]
lib = ctypes.CDLL(next((p for p in _libs if os.path.exists(p)), _libs[-1]))
src = open(sys.argv[1]).read() if len(sys.argv) > 1 and sys.argv[1] != "-" else sys.stdin.read()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"u.cu", 0, None, None) == 0
opts = [b"--ftz=false", b"--prec-div=true", b"--prec-sqrt=true", b"--fmad=false", b"--std=c++17", b"--gpu-architecture=sm_90", b"-Xptxas=-v"]
arr = (ctypes.c_char_p * len(opts))(*opts)
rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
sys.stderr.write(log.value.decode())
if rc: sys.exit(1)
lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)); buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetCUBIN(prog, buf)
f = tempfile.NamedTemporaryFile(suffix=".cubin", delete=False); f.write(buf.raw); f.close()
out = subprocess.run([f"{root}/nvidia/cu13/bin/nvdisasm", "-c", "-g", f.name], capture_output=True, text=True).stdout
if os.environ.get("SASS_DUMP"): open(os.environ["SASS_DUMP"], "w").write(out)
ins = [l for l in out.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", l)]
ops = collections.Counter()
for l in ins:
    m = re.search(r"\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", l)
    if m: ops[m.group(2).split(".")[0]] += 1
print("total", len(ins))
print(" ".join(f"{k}:{v}" for k, v in ops.most_common()))
