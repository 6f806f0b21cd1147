/* The activations' block function (activation.c), shared with the element-wise chain interpreter so
 * that a chain's link and the op's own kernel compute each element with the same code: a traced run
 * (op kernels) and a planned one (compiled chain) agree bit for bit. Not part of the cffi interface. */
#ifndef RTD_ACTIVATION_BLOCK_H
#define RTD_ACTIVATION_BLOCK_H
#include <stdint.h>
/* y[0..count) = f(x[0..count)) for an RTD_ACT_* op; every element gets the same instruction sequence
   wherever it sits (the tail goes through the same 8-float code). */
void rtd_activation_block(int op, const float *x, float *y, int64_t count);
#endif
