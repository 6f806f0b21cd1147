/* The element-wise chain interpreter (chain.h): a fused chain's links run block by block, each
 * block small enough to stay in L1, so the chain makes one pass over memory however many links
 * it has (NumPy makes one per link). Transcendental links (sigmoid, tanh, exp, erf, GELU) call the
 * same block function as the op kernels (activation.c). Nothing is generated at run time: the chain is data, an
 * opcode list the executor builds at load, and each opcode is a precompiled loop over a block.
 *
 * NaN and signed zeros behave as in the NumPy kernels: comparisons are ordered so a NaN operand
 * passes through max/min/clip/relu/hard-sigmoid, as np.maximum, np.minimum and np.clip propagate
 * it, and a tie gives np.maximum's and np.minimum's second operand (relu(-0) is +0).
 *
 * The caller (chain.py) validates the program and the inputs' lengths; they are checked again
 * here so a wrong call fails with a status instead of reading out of bounds.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <stdint.h>
#include "depthwise.h"
#include "activation.h"
#include "activation_block.h"
#include "chain.h"
#include "chain_links.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"

#define CLONES RTD_CLONES
#define BLOCK RTD_CHAIN_BLOCK
/* Below this many elements per thread, waking a pool thread costs more than it saves. */
#define MIN_ELEMENTS_PER_THREAD (1 << 15)
#define MAX_INPUTS RTD_CHAIN_MAX_INPUTS
#define ABSENT (-2)
#define PREVIOUS (-1)

/* dst[0..count) = in[(i / inner) % len] for output elements i in [start, start + count), written run by run
 * (a run: `inner` copies of one value, or with inner 1 a stretch of the input itself). */
static void gather(const float *in, int64_t len, int64_t inner, int64_t start, int64_t count, float *dst)
{
    int64_t run = start / inner, within = start - run * inner, index = run % len;
    for (int64_t i = 0; i < count;) {
        if (inner == 1) {   /* a stretch of the input, up to its end */
            int64_t take = count - i < len - index ? count - i : len - index;
            memcpy(dst + i, in + index, (size_t)take * sizeof(float));
            i += take;
            index = index + take == len ? 0 : index + take;
            continue;
        }
        int64_t take = count - i < inner - within ? count - i : inner - within;
        const float value = in[index];
        for (int64_t j = 0; j < take; j++) dst[i + j] = value;
        i += take;
        within += take;
        if (within == inner) {
            within = 0;
            index = index + 1 == len ? 0 : index + 1;
        }
    }
}

/* dst[0..count) = input k's values for output elements [start, start + count) (chain.h's layout), or a pointer
 * into the input where they lie there in a row: full-size inputs and a block within one stretch of one plane
 * are read in place, scalars were filled once before the first block, the rest are gathered plane by plane
 * (the elements [s, s + stride) of the output all read one plane). */
static const float *operand(const float *in, const int64_t *layout, int64_t start, int64_t count, float *dst,
                            int64_t out_len)
{
    const int64_t len = layout[0], inner = layout[1], planes = layout[2], stride = layout[3];
    if (planes == 1 && len == out_len && inner == 1)
        return in + start;
    if (planes == 1 && len == 1)
        return dst;
    if (inner == 1 && start % len + count <= len && (planes == 1 || start % stride + count <= stride))
        return in + start / stride % planes * len + start % len;   /* one stretch of one plane: read in place too */
    if (planes == 1) {
        gather(in, len, inner, start, count, dst);
        return dst;
    }
    for (int64_t i = 0; i < count;) {
        const int64_t at = start + i, within = at % stride, take = count - i < stride - within ? count - i : stride - within;
        gather(in + (at / stride) % planes * len, len, inner, at, take, dst + i);
        i += take;
    }
    return dst;
}

/* No fused multiply-add here (the build allows contraction elsewhere): each step rounds as the
 * NumPy kernel's separate ufunc does, so a traced run (NumPy) and a planned run agree bit for bit.
 * Each op is written once for 8-float vectors and once for the scalar tail, with the same
 * comparisons: NaN and ties come out as from NumPy's ufuncs in both. */
#define SELECT(mask, x, y) ((v8)(((v8i)(x) & (mask)) | ((v8i)(y) & ~(mask))))
#define VECTOR_OP(EXPR)                                                                                 \
    for (; i + 8 <= count; i += 8) {                                                                    \
        const v8 x = load8(a + i), y = b != NULL ? load8(b + i) : x, z = c != NULL ? load8(c + i) : x;  \
        (void)y; (void)z;                                                                               \
        store8(r + i, (EXPR));                                                                          \
    }
#define SCALAR_OP(EXPR)                                                                                 \
    for (; i < count; i++) {                                                                            \
        const float x = a[i], y = b != NULL ? b[i] : x, z = c != NULL ? c[i] : x;                        \
        (void)y; (void)z;                                                                               \
        r[i] = (EXPR);                                                                                  \
    }

RTD_INLINE v8 v_max(v8 x, v8 y) { return SELECT((x > y) | (x != x), x, y); }
RTD_INLINE v8 v_min(v8 x, v8 y) { return SELECT((x < y) | (x != x), x, y); }
RTD_INLINE v8 v_clip(v8 x, v8 lo, v8 hi) { const v8 v = SELECT(x < lo, lo, x); return SELECT(v > hi, hi, v); }
RTD_INLINE v8 v_relu(v8 x) { const v8 zero = {0}; return SELECT((x > zero) | (x != x), x, zero); }
RTD_INLINE v8 v_leaky(v8 x, float alpha) { const v8 zero = {0}; return SELECT(x < zero, x * alpha, x); }
RTD_INLINE v8 v_unit(v8 v) { const v8 zero = {0}, one = zero + 1.0f; v = SELECT(v < zero, zero, v); return SELECT(v > one, one, v); }
RTD_INLINE float s_unit(float v) { v = v < 0.0f ? 0.0f : v; return v > 1.0f ? 1.0f : v; }

/* sqrt has one correct rounding, so any instruction gives np.sqrt's bits; errno is not wanted (it would keep
   the loop scalar), a negative input gives NaN as in NumPy. */
__attribute__((optimize("no-math-errno"))) CLONES static void sqrt_block(const float *a, float *r, int64_t count)
{
    for (int64_t i = 0; i < count; i++) r[i] = sqrtf(a[i]);
}

__attribute__((optimize("fp-contract=off"))) CLONES static void apply(int op, const float *a, const float *b, const float *c,
                                                                      float alpha, float beta, float *r, int64_t count)
{
    int64_t i = 0;
    switch (op) {
    case RTD_CHAIN_ADD: VECTOR_OP(x + y) SCALAR_OP(x + y) break;
    case RTD_CHAIN_SUB: VECTOR_OP(x - y) SCALAR_OP(x - y) break;
    case RTD_CHAIN_MUL: VECTOR_OP(x * y) SCALAR_OP(x * y) break;
    case RTD_CHAIN_DIV: VECTOR_OP(x / y) SCALAR_OP(x / y) break;
    case RTD_CHAIN_MAX: VECTOR_OP(v_max(x, y)) SCALAR_OP((x > y || x != x) ? x : y) break;
    case RTD_CHAIN_MIN: VECTOR_OP(v_min(x, y)) SCALAR_OP((x < y || x != x) ? x : y) break;
    case RTD_CHAIN_CLIP:   /* maximum with the low limit, then minimum with the high one (min > max gives max) */
        VECTOR_OP(v_clip(x, y, z)) SCALAR_OP(((x < y ? y : x) > z) ? z : (x < y ? y : x)) break;
    case RTD_CHAIN_RELU:   /* np.maximum(x, 0): NaN stays, -0 becomes +0 (ties give the second operand) */
        VECTOR_OP(v_relu(x)) SCALAR_OP((x > 0.0f || x != x) ? x : 0.0f) break;
    case RTD_CHAIN_LEAKY_RELU: VECTOR_OP(v_leaky(x, alpha)) SCALAR_OP(x < 0.0f ? alpha * x : x) break;
    case RTD_CHAIN_HARD_SIGMOID: VECTOR_OP(v_unit(x * alpha + beta)) SCALAR_OP(s_unit(alpha * x + beta)) break;
    case RTD_CHAIN_HARD_SWISH:
        VECTOR_OP(x * v_unit(x * (1.0f / 6.0f) + 0.5f)) SCALAR_OP(x * s_unit(x * (1.0f / 6.0f) + 0.5f)) break;
    case RTD_CHAIN_NEG: VECTOR_OP(-x) SCALAR_OP(-x) break;
    case RTD_CHAIN_ABS:   /* clears -0's sign too */
        VECTOR_OP((v8)((v8i)x & 0x7fffffff)) SCALAR_OP(fabsf(x)) break;
    case RTD_CHAIN_SQRT: sqrt_block(a, r, count); break;
    default:   /* the transcendental ones: the op kernels' own code (activation.c) */
        if (op >= RTD_CHAIN_SIGMOID && op <= RTD_CHAIN_GELU_TANH)
            rtd_activation_block(op - RTD_CHAIN_SIGMOID + RTD_ACT_SIGMOID, a, r, count);
        break;
    }
}

/* Clip's absent limits: -FLT_MAX and FLT_MAX, filled once when the library loads. */
static float lowest[BLOCK], highest[BLOCK];

__attribute__((constructor)) static void fill_limits(void)
{
    for (int64_t i = 0; i < BLOCK; i++) { lowest[i] = -FLT_MAX; highest[i] = FLT_MAX; }
}

void rtd_chain_links(const float *const *view, const int32_t *links, const float *params, int64_t n_links, float *out,
                     int64_t count)
{
    float results[2][BLOCK];
    const float *previous = NULL;
    for (int64_t l = 0; l < n_links; l++) {
        const float *src[3];
        for (int s = 0; s < 3; s++) {
            int32_t source = links[4 * l + 1 + s];
            src[s] = source == PREVIOUS ? previous : source == ABSENT ? (s == 2 ? highest : lowest) : view[source];
        }
        float *result = l == n_links - 1 ? out : results[l % 2];
        apply(links[4 * l], src[0], src[1], src[2], params[2 * l], params[2 * l + 1], result, count);
        previous = result;
    }
}

int rtd_chain_check(const int32_t *links, int64_t n_links, int64_t n_inputs)
{
    if (n_inputs < 0 || n_inputs > MAX_INPUTS || n_links < 1)
        return RTD_NATIVE_E_ARGUMENT;
    for (int64_t l = 0; l < n_links; l++) {
        if (links[4 * l] < RTD_CHAIN_ADD || links[4 * l] > RTD_CHAIN_SQRT)
            return RTD_NATIVE_E_ARGUMENT;
        for (int s = 1; s < 4; s++) {
            int32_t source = links[4 * l + s];
            if (source < ABSENT || source >= n_inputs || (source == PREVIOUS && l == 0))
                return RTD_NATIVE_E_ARGUMENT;
        }
    }
    return 0;
}

struct chain {
    const float **inputs; const int64_t *layouts; int64_t n_inputs;
    const int32_t *links; const float *params; int64_t n_links; float *out; int64_t out_len;
};

/* Blocks [first, last) of the output, each block's links in L1-sized buffers on this thread's stack. */
static void run_blocks(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct chain *a = context;
    (void)worker;
    float gathered[MAX_INPUTS][BLOCK];
    for (int64_t k = 0; k < a->n_inputs; k++)
        if (a->layouts[4 * k] == 1 && a->layouts[4 * k + 2] == 1)
            for (int64_t i = 0; i < BLOCK; i++) gathered[k][i] = a->inputs[k][0];
    for (int64_t block = first; block < last; block++) {
        const int64_t start = block * BLOCK, count = a->out_len - start < BLOCK ? a->out_len - start : BLOCK;
        const float *view[MAX_INPUTS];
        for (int64_t k = 0; k < a->n_inputs; k++)
            view[k] = operand(a->inputs[k], a->layouts + 4 * k, start, count, gathered[k], a->out_len);
        rtd_chain_links(view, a->links, a->params, a->n_links, a->out + start, count);
    }
}

int rtd_chain_f32(const float **inputs, const int64_t *layouts, int64_t n_inputs, const int32_t *links, const float *params,
                  int64_t n_links, float *out, int64_t out_len)
{
    if (out_len < 0 || rtd_chain_check(links, n_links, n_inputs) != 0)
        return RTD_NATIVE_E_ARGUMENT;
    for (int64_t k = 0; k < n_inputs; k++) {
        const int64_t *layout = layouts + 4 * k;
        if (inputs[k] == NULL || layout[0] < 1 || layout[1] < 1 || layout[2] < 1 || layout[3] < 1
            || (out_len > 0 && (layout[0] > out_len || layout[2] > out_len / layout[0])))   /* len * planes <= out_len */
            return RTD_NATIVE_E_LENGTH;
    }
    struct chain a = {inputs, layouts, n_inputs, links, params, n_links, out, out_len};
    const int64_t blocks = (out_len + BLOCK - 1) / BLOCK;
    int64_t threads = rtd_threads();
    if (out_len / (threads > 0 ? threads : 1) < MIN_ELEMENTS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, blocks, run_blocks, &a);
    return 0;
}
