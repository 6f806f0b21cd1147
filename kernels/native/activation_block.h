/* The activations' block function (activation.c), shared with the element-wise chain interpreter so
 * that a chain's link and the op's own kernel compute each element with the same code: a traced run
 * (op kernels) and a planned one (compiled chain) agree bit for bit. Below it, the 8-float exp, sigmoid
 * and tanh themselves (activation.c describes them), which the recurrences' gates (recurrent.c) use too.
 * Not part of the cffi interface. */
#ifndef RTD_ACTIVATION_BLOCK_H
#define RTD_ACTIVATION_BLOCK_H
#include <stdint.h>
#include "simd.h"
/* y[0..count) = f(x[0..count)) for an RTD_ACT_* op; every element gets the same instruction sequence
   wherever it sits (the tail goes through the same 8-float code). */
void rtd_activation_block(int op, const float *x, float *y, int64_t count);

RTD_INLINE v8 splat(float v) { return (v8){v, v, v, v, v, v, v, v}; }
RTD_INLINE v8 select8(v8i mask, v8 a, v8 b) { return (v8)(((v8i)a & mask) | ((v8i)b & ~mask)); }

/* exp's range reduction and polynomial for x within exp's finite range: exp(x) = p * 2^n, n the integer nearest
   x / ln 2, carried in *k's bits (x / ln 2 plus SHIFTER, 1.5 * 2^23, which rounds it: (v8i)*k - (v8i)SHIFTER is n). */
#define SHIFTER 12582912.0f
RTD_INLINE v8 exp_reduced8(v8 x, v8 *k)
{
    *k = x * splat(1.44269504088896341f) + splat(SHIFTER);
    const v8 n = *k - splat(SHIFTER);
    const v8 r = (x - n * splat(0.693359375f)) - n * splat(-2.12194440e-4f);
    v8 p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    return p * (r * r) + r + splat(1.0f);
}

RTD_INLINE v8 exp8(v8 x)
{
    /* x held to [-104, 88.8]: exp(-104) rounds to 0 and exp(88.8) overflows to inf through the two-step scale,
       so the held ends need no selects of their own (the same bits as selecting 0 below -103.972084 and inf
       above 88.7228394, for every float); a NaN passes the hold and comes out NaN. */
    const v8 high = splat(88.8f), low = splat(-104.0f);
    v8 xc = select8(x > high, high, x);
    xc = select8(xc < low, low, xc);
    v8 k;
    const v8 p = exp_reduced8(xc, &k);
    const v8i ni = (v8i)k - (v8i)splat(SHIFTER);
    const v8i half = ni >> 1, rest = ni - half;
    const v8 scale1 = (v8)((half + 127) << 23), scale2 = (v8)((rest + 127) << 23);
    return p * scale1 * scale2;
}

RTD_INLINE v8 sigmoid8(v8 x) { return splat(1.0f) / (splat(1.0f) + exp8(-x)); }

RTD_INLINE v8 tanh8(v8 x)
{
    const v8i sign = (v8i)x & (v8i)splat(-0.0f);
    const v8 ax = (v8)((v8i)x ^ sign);
    const v8 z = x * x;
    v8 small = splat(-5.70498872745e-3f);
    small = small * z + splat(2.06390887954e-2f);
    small = small * z + splat(-5.37397155531e-2f);
    small = small * z + splat(1.33314422036e-1f);
    small = small * z + splat(-3.33332819422e-1f);
    small = small * z * x + x;
    /* 1 - 2 / (exp(2|x|) + 1), |x| held to 9.1 (from 9.02 on it rounds to 1 either way): exp's argument stays in
       [0, 18.2], where exp8's steps need neither its range hold nor its two-step scale. The same bits as with exp8
       for every float (checked over a third of them); a NaN passes the hold and comes out NaN. */
    const v8 a = select8(ax > splat(9.1f), splat(18.2f), ax + ax);
    v8 k;
    const v8 e = exp_reduced8(a, &k) * (v8)(((v8i)k - (v8i)splat(SHIFTER) + 127) << 23);
    const v8 large = (v8)((v8i)(splat(1.0f) - splat(2.0f) / (e + splat(1.0f))) | sign);
    return select8(ax < splat(0.625f), small, large);   /* a NaN takes the large form: NaN */
}
#endif
