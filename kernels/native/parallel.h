/* The kernels' parallel-for (parallel.c), not part of the cffi interface. */
#ifndef RTD_PARALLEL_H
#define RTD_PARALLEL_H
#include <stdint.h>
/* body(ctx, worker, first, last) over consecutive ranges [first, last) that together cover the parts once,
   on at most `threads` threads (the calling one included, worker 0; worker < threads names the thread, for
   its scratch); returns after every part has run. `threads` <= 1 runs everything here in one call. */
void rtd_parallel_for(int64_t threads, int64_t parts, void (*body)(void *, int64_t, int64_t, int64_t), void *ctx);
#endif
