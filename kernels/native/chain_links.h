/* The chain interpreter's links over one block (chain.c), shared with the convolution's epilogue
 * (conv.c), which runs a fused chain on each output tile; not part of the cffi interface. */
#ifndef RTD_CHAIN_LINKS_H
#define RTD_CHAIN_LINKS_H
#include <stdint.h>

#define RTD_CHAIN_BLOCK 512   /* elements per block, at most: each block's links stay in L1 */
#define RTD_CHAIN_MAX_INPUTS 16

/* The program's links over `count` (<= RTD_CHAIN_BLOCK) elements into out: view[k] holds input k's
   values for these elements (chain.h's program: four int32 and two floats per link). */
void rtd_chain_links(const float *const *view, const int32_t *links, const float *params, int64_t n_links, float *out,
                     int64_t count);
/* 0 when the program is well formed for n_inputs inputs (opcodes known, sources in range). */
int rtd_chain_check(const int32_t *links, int64_t n_links, int64_t n_inputs);
#endif
