/* Which output columns a window's tap reads inside the input, shared by the depthwise convolution
 * (depthwise.c) and max pooling (pool.c), which both run tap by tap over an output row so the loop over
 * its columns is one contiguous (or strided) run the compiler vectorises. Not part of the cffi interface. */
#ifndef RTD_WINDOW_H
#define RTD_WINDOW_H
#include <stdint.h>

/* The output columns [lo, hi) whose input column ox*sw + base lies in [0, width). */
static inline void rtd_tap_columns(int64_t base, int64_t sw, int64_t width, int64_t ow, int64_t *lo, int64_t *hi)
{
    int64_t first, last;
    if (sw == 1) {   /* no division: this runs once per output row and tap */
        first = base >= 0 ? 0 : -base;
        last = width - base < 0 ? 0 : width - base;
    } else {
        first = base >= 0 ? 0 : (-base + sw - 1) / sw;
        last = width - 1 - base < 0 ? 0 : (width - 1 - base) / sw + 1;
    }
    if (last > ow) last = ow;
    if (first > last) first = last;
    *lo = first;
    *hi = last;
}
#endif
