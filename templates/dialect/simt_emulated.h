// The integer helpers CUDA's shim takes from the hardware (dp4a, the funnel shift), in
// the portable form the CPU and Metal share.
DEVICE uint bytesum_acc(uint x, uint c) { return c + (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24); }
DEVICE uint funnel_r(uint lo, uint hi, uint off) { return (lo >> off) | (hi << (32u - off)); }
