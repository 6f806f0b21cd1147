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
#include "threads.h"

#define CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#define BLOCK RTD_CHAIN_BLOCK
/* Below this many elements per thread, waking a pool thread costs more than it saves. */
#define MIN_ELEMENTS_PER_THREAD (1 << 15)
#define MAX_INPUTS RTD_CHAIN_MAX_INPUTS
#define ABSENT (-2)
#define PREVIOUS (-1)

/* dst[0..count) = input k's values for output elements [start, start + count): full-size inputs
 * are read in place, scalars were filled once before the first block, the rest are written run
 * by run (a run: `inner` copies of one value, or with inner 1 a stretch of the input itself). */
static const float *operand(const float *in, int64_t len, int64_t inner, int64_t start, int64_t count,
                            float *dst, int64_t out_len)
{
    if (len == out_len && inner == 1)
        return in + start;
    if (len == 1)
        return dst;
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
    return dst;
}

/* No fused multiply-add here (the build allows contraction elsewhere): each step rounds as the
 * NumPy kernel's separate ufunc does, so a traced run (NumPy) and a planned run agree bit for bit. */
__attribute__((optimize("fp-contract=off"))) CLONES static void apply(int op, const float *restrict a, const float *restrict b, const float *restrict c,
                         float alpha, float beta, float *restrict r, int64_t count)
{
    switch (op) {
    case RTD_CHAIN_ADD: for (int64_t i = 0; i < count; i++) r[i] = a[i] + b[i]; break;
    case RTD_CHAIN_SUB: for (int64_t i = 0; i < count; i++) r[i] = a[i] - b[i]; break;
    case RTD_CHAIN_MUL: for (int64_t i = 0; i < count; i++) r[i] = a[i] * b[i]; break;
    case RTD_CHAIN_DIV: for (int64_t i = 0; i < count; i++) r[i] = a[i] / b[i]; break;
    case RTD_CHAIN_MAX: for (int64_t i = 0; i < count; i++) r[i] = (a[i] > b[i] || a[i] != a[i]) ? a[i] : b[i]; break;
    case RTD_CHAIN_MIN: for (int64_t i = 0; i < count; i++) r[i] = (a[i] < b[i] || a[i] != a[i]) ? a[i] : b[i]; break;
    case RTD_CHAIN_CLIP:   /* maximum with the low limit, then minimum with the high one (min > max gives max) */
        for (int64_t i = 0; i < count; i++) {
            float v = a[i] < b[i] ? b[i] : a[i];
            r[i] = v > c[i] ? c[i] : v;
        }
        break;
    case RTD_CHAIN_RELU:   /* np.maximum(x, 0): NaN stays, -0 becomes +0 (ties give the second operand) */
        for (int64_t i = 0; i < count; i++) r[i] = (a[i] > 0.0f || a[i] != a[i]) ? a[i] : 0.0f;
        break;
    case RTD_CHAIN_LEAKY_RELU: for (int64_t i = 0; i < count; i++) r[i] = a[i] < 0.0f ? alpha * a[i] : a[i]; break;
    case RTD_CHAIN_HARD_SIGMOID:
        for (int64_t i = 0; i < count; i++) {
            float v = alpha * a[i] + beta;
            v = v < 0.0f ? 0.0f : v;
            r[i] = v > 1.0f ? 1.0f : v;
        }
        break;
    case RTD_CHAIN_HARD_SWISH:
        for (int64_t i = 0; i < count; i++) {
            float v = a[i] * (1.0f / 6.0f) + 0.5f;
            v = v < 0.0f ? 0.0f : v;
            r[i] = a[i] * (v > 1.0f ? 1.0f : v);
        }
        break;
    case RTD_CHAIN_NEG: for (int64_t i = 0; i < count; i++) r[i] = -a[i]; break;
    case RTD_CHAIN_ABS: for (int64_t i = 0; i < count; i++) r[i] = fabsf(a[i]); break;   /* clears -0's sign too */
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
        if (links[4 * l] < RTD_CHAIN_ADD || links[4 * l] > RTD_CHAIN_GELU_TANH)
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
    const float **inputs; const int64_t *in_len, *in_inner; int64_t n_inputs;
    const int32_t *links; const float *params; int64_t n_links; float *out; int64_t out_len;
};

/* Blocks [first, last) of the output, each block's links in L1-sized buffers on this thread's stack. */
static void run_blocks(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct chain *a = context;
    (void)worker;
    float gathered[MAX_INPUTS][BLOCK];
    for (int64_t k = 0; k < a->n_inputs; k++)
        if (a->in_len[k] == 1)
            for (int64_t i = 0; i < BLOCK; i++) gathered[k][i] = a->inputs[k][0];
    for (int64_t block = first; block < last; block++) {
        const int64_t start = block * BLOCK, count = a->out_len - start < BLOCK ? a->out_len - start : BLOCK;
        const float *view[MAX_INPUTS];
        for (int64_t k = 0; k < a->n_inputs; k++)
            view[k] = operand(a->inputs[k], a->in_len[k], a->in_inner[k], start, count, gathered[k], a->out_len);
        rtd_chain_links(view, a->links, a->params, a->n_links, a->out + start, count);
    }
}

int rtd_chain_f32(const float **inputs, const int64_t *in_len, const int64_t *in_inner, int64_t n_inputs,
                  const int32_t *links, const float *params, int64_t n_links, float *out, int64_t out_len)
{
    if (out_len < 0 || rtd_chain_check(links, n_links, n_inputs) != 0)
        return RTD_NATIVE_E_ARGUMENT;
    for (int64_t k = 0; k < n_inputs; k++)
        if (inputs[k] == NULL || in_len[k] < 1 || in_inner[k] < 1 || (in_len[k] > out_len && out_len > 0))
            return RTD_NATIVE_E_LENGTH;
    struct chain a = {inputs, in_len, in_inner, n_inputs, links, params, n_links, out, out_len};
    const int64_t blocks = (out_len + BLOCK - 1) / BLOCK;
    int64_t threads = rtd_threads();
    if (out_len / (threads > 0 ? threads : 1) < MIN_ELEMENTS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, blocks, run_blocks, &a);
    return 0;
}
