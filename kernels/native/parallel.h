/* The kernels' parallel-for (parallel.c), not part of the cffi interface. */
#ifndef RTD_PARALLEL_H
#define RTD_PARALLEL_H
#include <stdint.h>
/* body(ctx, worker, first, last) for parts [first, last), on at most `threads` threads (the calling
   one included); returns after every part has run. `threads` <= 1 runs everything here. */
void rtd_parallel_for(int64_t threads, int64_t parts, void (*body)(void *, int64_t, int64_t, int64_t), void *ctx);
#endif
