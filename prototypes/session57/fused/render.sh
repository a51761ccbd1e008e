#!/bin/bash
# The rendered units the fused-prescale harness starts from (run from this folder, where
# there is a Rust toolchain; the device has none, so they are committed), then the fused
# forms `fused_gen.py` edits them into (the call scripts run it again on the device).
# `mma_unit`'s arguments: rows cols k code L M row_tiles col_split m_tile x_stage k_split
# max_registers operands paired_windows x_f16 batch_stage opt_in_shared early_words fused_x.
set -e
u() { out=$1; shift; cargo run --release -q --example mma_unit -- "$@" > "$out"; }
u win_a.cu 17408 5120 2 1mad 12 1 1 8 16 global 1 0 f16 1 1 0 0 0       # the M 1 winner
u sh_a.cu 17408 5120 2 1mad 12 1 1 8 16 shared 1 0 f16 1 1 0 0 0        # its staged twin
u sh_a_ew.cu 17408 5120 2 1mad 12 1 1 8 16 shared 1 0 f16 1 1 0 0 1
u sh_a_ks2.cu 17408 5120 2 1mad 12 1 1 8 16 shared 2 0 f16 1 1 0 0 1
u win_b.cu 5120 17408 2 1mad 12 1 1 4 16 global 8 48 f16 0 1 0 0 0      # the M 1 winner
u sh_b.cu 5120 17408 2 1mad 12 1 1 4 16 shared 8 48 f16 0 1 0 0 1
u sh_b_nocap.cu 5120 17408 2 1mad 12 1 1 4 16 shared 8 0 f16 0 1 0 0 1
u sh_c.cu 17408 5120 2 1mad 12 16 4 2 16 shared 8 64 f16 1 1 1 0 1     # the M 16 winner
u sh_c_nocap.cu 17408 5120 2 1mad 12 16 4 2 16 shared 8 0 f16 1 1 1 0 1
# The shipped template's fused_x and its unfused (prescaled-x) twin.
u ts_a.cu 17408 5120 2 1mad 12 1 1 8 16 shared 1 0 f16 1 1 1 0 0 0
u tf_a.cu 17408 5120 2 1mad 12 1 1 8 16 shared 1 0 f16 1 0 1 0 0 1
u ts_b.cu 5120 17408 2 1mad 12 1 1 4 16 shared 8 0 f16 0 1 1 0 1 0
u tf_b.cu 5120 17408 2 1mad 12 1 1 4 16 shared 8 0 f16 0 0 1 0 1 1
python3 fused_gen.py
