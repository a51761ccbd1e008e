// One translation unit per (CODE, KB, LB): instantiates the configs and registers them at start-up.
#include "kern.cuh"
#define REG(NB, RT, CS, Q, D, KS) REG_(NB, RT, CS, Q, D, KS)
#define REG_(NB, RT, CS, Q, D, KS) \
  register_entry(Entry{CODEV, KB, LB, NB, Cfg{RT, CS, Q, D, KS}, launch_fast<CODEV, KB, LB, NB, RT, CS, Q, D, KS>, "rt" #RT "cs" #CS "q" #Q "d" #D "ks" #KS});
#if CODEV == 0
#define QB 32
#else
#define QB 16
#endif
#define CFGS(NB) REG(NB, 2, 4, QB, 2, 1) REG(NB, 4, 2, QB, 2, 1) REG(NB, 1, 8, QB, 2, 1) REG(NB, 1, 4, QB, 2, 2) REG(NB, 2, 4, 8, 2, 1)
static int reg_all() {
#if CODEV == 3
  REG(1, 2, 4, 32, 2, 1) REG(1, 1, 4, 32, 2, 2) REG(1, 4, 2, 32, 2, 1) REG(2, 2, 4, 32, 2, 1)
#else
  CFGS(1) CFGS(2)
#endif
  return 0;
}
static int registered_ = reg_all();
