/* rtd's own single-precision GEMM (gemm_core.h) and the guarded GEMM entry point (gemm.h).
 *
 * The micro-kernel keeps a 6 x 16 tile of c in twelve 8-float vector registers and, per step of k,
 * loads one 16-float row of a b panel and broadcasts one float of each of a's six rows: 12
 * multiply-adds per 8 loads, which keeps both FMA units of an AVX2 core busy (about 30 flops a
 * cycle), as onnxruntime's MLAS does. It is written with GCC's vector extensions (simd.h), so the
 * same source compiles for every target_clones clone.
 *
 * a is read in place (no packing: its rows stream through L1 while a b panel slice stays there);
 * b is packed in panels of 16 columns, KC x NC at a time, into a per-thread buffer, except for a
 * few rows, where b is read in place. Sums run over k in KC-long passes that add onto c; bias and
 * ReLU are applied on the last pass while the tile is in registers.
 * The order of the additions differs from OpenBLAS's, so results differ from NumPy's in the last
 * bits (the tests compare against float64 products with float32 tolerances).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "depthwise.h"
#include "chain_links.h"
#include "gemm.h"
#include "gemm_core.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"

#define CLONES RTD_CLONES
#define INLINE RTD_INLINE
#define MR RTD_GEMM_MR
#define NR RTD_GEMM_NR
#define KC RTD_GEMM_KC
#define NC RTD_GEMM_NC
#define MC 120                            /* rows per pass over a b block: 120 x KC floats of a stay in L2 */
#define FEW_ROWS 4                        /* up to this many rows, a row-major b is read in place, not packed */
#define MIN_FLOPS_PER_THREAD (1 << 19)    /* below this (~15 us) a pool thread costs more than it saves (conv.c) */


/* The epilogue of one row of the tile: + c (not the first pass), and on the last pass + bias, ReLU. */
INLINE void finish_row(float *c, v8 x0, v8 x1, int first, int last, const float *bias_col, float bias_row, int relu)
{
    if (!first) {
        x0 += load8(c);
        x1 += load8(c + 8);
    }
    if (last) {
        if (bias_col != NULL) {
            x0 += load8(bias_col);
            x1 += load8(bias_col + 8);
        }
        x0 += bias_row;
        x1 += bias_row;
        if (relu) {
            x0 = relu8(x0);
            x1 = relu8(x1);
        }
    }
    store8(c, x0);
    store8(c + 8, x1);
}

/* The same for a tile narrower than 16 columns, element by element from the registers' copy. */
INLINE void finish_row_part(float *c, v8 x0, v8 x1, int cols, int first, int last, const float *bias_col,
                            float bias_row, int relu)
{
    float v[NR];
    store8(v, x0);
    store8(v + 8, x1);
    for (int j = 0; j < cols; j++) {
        float s = v[j] + (first ? 0.0f : c[j]);
        if (last) {
            s += (bias_col != NULL ? bias_col[j] : 0.0f) + bias_row;
            s = relu && s < 0.0f ? 0.0f : s;
        }
        c[j] = s;
    }
}

/* c[rows x cols] (+)= a[rows x kc] (row stride lda) @ b[kc x 16] (row stride ldb: 16 for a packed panel),
 * rows a constant. */
INLINE void tile(const int rows, int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                 int64_t ldc, int cols, int first, int last, const float *bias_col, const float *bias_row, int relu)
{
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
    v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    v8 c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; k++, b += ldb) {
        const v8 b0 = load8(b), b1 = load8(b + 8);
        c00 += b0 * a0[k]; c01 += b1 * a0[k];
        if (rows > 1) { c10 += b0 * a1[k]; c11 += b1 * a1[k]; }
        if (rows > 2) { c20 += b0 * a2[k]; c21 += b1 * a2[k]; }
        if (rows > 3) { c30 += b0 * a3[k]; c31 += b1 * a3[k]; }
        if (rows > 4) { c40 += b0 * a4[k]; c41 += b1 * a4[k]; }
        if (rows > 5) { c50 += b0 * a5[k]; c51 += b1 * a5[k]; }
    }
#define ROW_OUT(r)                                                                                                   \
    if (rows > r) {                                                                                                  \
        const float bias = bias_row != NULL ? bias_row[r] : 0.0f;                                                    \
        if (cols == NR) finish_row(c + r * ldc, c##r##0, c##r##1, first, last, bias_col, bias, relu);               \
        else finish_row_part(c + r * ldc, c##r##0, c##r##1, cols, first, last, bias_col, bias, relu);               \
    }
    ROW_OUT(0) ROW_OUT(1) ROW_OUT(2) ROW_OUT(3) ROW_OUT(4) ROW_OUT(5)
#undef ROW_OUT
}

#define WIDE 4   /* panels a lone row's tile covers at once */

/* One row of c over WIDE panels of 16 columns: eight independent sums per step of k, where tile()'s one row
 * has two, each waiting on the multiply-add before it (a GEMV, as a recurrent cell's, was bound by that
 * latency). Panel p's rows start at b + p * panel_step (row stride ldb); each c value still sums over k in
 * order, with the multiply-adds tile() makes, so its bits are tile()'s. */
INLINE void wide_row(int64_t kc, const float *a, const float *b, int64_t ldb, int64_t panel_step, float *c, int first, int last,
                     const float *bias_col, float bias_row, int relu)
{
    const float *b1 = b + panel_step, *b2 = b + 2 * panel_step, *b3 = b + 3 * panel_step;
    v8 x0 = {0}, x1 = {0}, x2 = {0}, x3 = {0}, x4 = {0}, x5 = {0}, x6 = {0}, x7 = {0};
    for (int64_t k = 0; k < kc; k++) {
        const int64_t at = k * ldb;
        x0 += load8(b + at) * a[k]; x1 += load8(b + at + 8) * a[k];
        x2 += load8(b1 + at) * a[k]; x3 += load8(b1 + at + 8) * a[k];
        x4 += load8(b2 + at) * a[k]; x5 += load8(b2 + at + 8) * a[k];
        x6 += load8(b3 + at) * a[k]; x7 += load8(b3 + at + 8) * a[k];
    }
    finish_row(c, x0, x1, first, last, bias_col, bias_row, relu);
    finish_row(c + NR, x2, x3, first, last, bias_col != NULL ? bias_col + NR : NULL, bias_row, relu);
    finish_row(c + 2 * NR, x4, x5, first, last, bias_col != NULL ? bias_col + 2 * NR : NULL, bias_row, relu);
    finish_row(c + 3 * NR, x6, x7, first, last, bias_col != NULL ? bias_col + 3 * NR : NULL, bias_row, relu);
}

INLINE void any_tile(int rows, int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                     int64_t ldc, int cols, int first, int last, const float *bias_col, const float *bias_row, int relu)
{
    switch (rows) {   /* one specialised copy per row count: no multiply-add on rows that do not exist */
    case 6: tile(6, kc, a, lda, b, ldb, c, ldc, cols, first, last, bias_col, bias_row, relu); break;
    case 5: tile(5, kc, a, lda, b, ldb, c, ldc, cols, first, last, bias_col, bias_row, relu); break;
    case 4: tile(4, kc, a, lda, b, ldb, c, ldc, cols, first, last, bias_col, bias_row, relu); break;
    case 3: tile(3, kc, a, lda, b, ldb, c, ldc, cols, first, last, bias_col, bias_row, relu); break;
    case 2: tile(2, kc, a, lda, b, ldb, c, ldc, cols, first, last, bias_col, bias_row, relu); break;
    default: tile(1, kc, a, lda, b, ldb, c, ldc, cols, first, last, bias_col, bias_row, relu); break;
    }
}

/* The fused chain over finished row i of c, columns [col0, col0 + cols) (at most NC), in place. */
static void chain_row(const struct rtd_gemm *g, int64_t i, int64_t col0, int64_t cols)
{
    float chained[NC], filled[RTD_CHAIN_MAX_INPUTS][NC];
    const float *view[RTD_CHAIN_MAX_INPUTS];
    float *row = g->c + i * g->ldc + col0;
    for (int64_t k = 0; k < g->n_chain_inputs; k++) {
        if (g->chain_len[k] == 0) {
            view[k] = row;
            continue;
        }
        const float v = g->chain_inputs[k][g->chain_len[k] == 1 ? 0 : g->chain_row0 + i];
        for (int64_t j = 0; j < cols; j++) filled[k][j] = v;
        view[k] = filled[k];
    }
    rtd_chain_links(view, g->links, g->params, g->n_links, chained, cols);
    memcpy(row, chained, (size_t)cols * sizeof(float));
}

/* Rows [k0, k0 + kc) of b's columns [j0, j0 + nc) as panels of 16 (the last zero-padded). */
INLINE void pack(const struct rtd_gemm *g, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float *packed)
{
    for (int64_t j = 0; j < nc; j += NR) {
        float *panel = packed + j / NR * kc * NR;
        const int64_t cols = nc - j < NR ? nc - j : NR;
        if (g->b_layout == RTD_GEMM_B_COLUMNS) {   /* column j0 + j + c is row j0 + j + c of the stored matrix */
            for (int64_t col = 0; col < NR; col++) {
                if (col >= cols) {
                    for (int64_t k = 0; k < kc; k++) panel[k * NR + col] = 0.0f;
                    continue;
                }
                const float *src = g->b + (j0 + j + col) * g->ldb + k0;
                for (int64_t k = 0; k < kc; k++) panel[k * NR + col] = src[k];
            }
        } else if (cols == NR) {
            for (int64_t k = 0; k < kc; k++, panel += NR)
                memcpy(panel, g->b + (k0 + k) * g->ldb + j0 + j, NR * sizeof(float));
        } else {
            for (int64_t k = 0; k < kc; k++, panel += NR) {
                const float *src = g->b + (k0 + k) * g->ldb + j0 + j;
                for (int64_t t = 0; t < NR; t++) panel[t] = t < cols ? src[t] : 0.0f;
            }
        }
    }
}

/* A few rows times a transposed b (n, k): each c value one dot product of two contiguous rows, 8 lanes
 * at a time (packing b's transpose would cost more than the product). Then bias, ReLU, the chain. */
INLINE void few_rows_columns(const struct rtd_gemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    for (int64_t i = m0; i < m1; i++) {
        const float *a = g->a + i * g->lda;
        float *c = g->c + i * g->ldc;
        for (int64_t j = n0; j < n1; j++) {
            const float *b = g->b + j * g->ldb;
            v8 s0 = {0}, s1 = {0};
            int64_t k = 0;
            for (; k + 16 <= g->k; k += 16) {
                s0 += load8(a + k) * load8(b + k);
                s1 += load8(a + k + 8) * load8(b + k + 8);
            }
            s0 += s1;
            float sum = ((s0[0] + s0[4]) + (s0[1] + s0[5])) + ((s0[2] + s0[6]) + (s0[3] + s0[7]));
            for (; k < g->k; k++) sum += a[k] * b[k];
            if (g->bias_kind == RTD_GEMM_BIAS_COLUMN) sum += g->bias[j];
            else if (g->bias_kind == RTD_GEMM_BIAS_ROW) sum += g->bias[i];
            c[j] = g->relu && sum < 0.0f ? 0.0f : sum;
        }
    }
    if (g->n_links > 0)
        for (int64_t i = m0; i < m1; i++)
            for (int64_t j0 = n0; j0 < n1; j0 += NC) chain_row(g, i, j0, n1 - j0 < NC ? n1 - j0 : NC);
}

CLONES void rtd_gemm_block(const struct rtd_gemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    if (g->b_layout == RTD_GEMM_B_COLUMNS && m1 - m0 <= FEW_ROWS) {
        few_rows_columns(g, m0, m1, n0, n1);
        return;
    }
    /* one packing buffer per thread (the pool's threads and any caller's), made on its first use */
    static _Thread_local float packed[KC * NC] __attribute__((aligned(64)));
    /* a few rows of a row-major b: each b value is used by so few rows that packing it costs more than
       reading it in place, 16 columns of a row at a time */
    const int in_place = g->b_layout == RTD_GEMM_B_ROWS && m1 - m0 <= FEW_ROWS;
    const int prepacked = g->b_layout == RTD_GEMM_B_PACKED;
    for (int64_t j0 = n0; j0 < n1; j0 += NC) {   /* c's block (rows x NC) stays in L2 across the k passes */
        const int64_t nc = n1 - j0 < NC ? n1 - j0 : NC;
        for (int64_t k0 = 0; k0 < g->k; k0 += KC) {
            const int64_t kc = g->k - k0 < KC ? g->k - k0 : KC;
            const int first = k0 == 0, last = k0 + kc == g->k;
            if (!in_place && !prepacked)
                pack(g, k0, kc, j0, nc, packed);
            for (int64_t i0 = m0; i0 < m1; i0 += MC) {
                const int64_t i1 = m1 - i0 < MC ? m1 : i0 + MC;
                for (int64_t j = 0; j < nc; j += NR) {
                    const int cols = nc - j < NR ? (int)(nc - j) : NR;
                    const float *b = prepacked ? g->b + (j0 + j) / NR * g->k * NR + k0 * NR : packed + j / NR * kc * NR;
                    int64_t ldb = NR;
                    if (i1 - i0 == 1 && (in_place || prepacked) && j + WIDE * NR <= nc) {   /* a lone row: wide_row */
                        wide_row(kc, g->a + i0 * g->lda + k0, in_place ? g->b + k0 * g->ldb + j0 + j : b, in_place ? g->ldb : NR,
                                 in_place ? NR : g->k * NR, g->c + i0 * g->ldc + j0 + j, first, last,
                                 g->bias_kind == RTD_GEMM_BIAS_COLUMN ? g->bias + j0 + j : NULL,
                                 g->bias_kind == RTD_GEMM_BIAS_ROW ? g->bias[i0] : 0.0f, g->relu);
                        j += (WIDE - 1) * NR;
                        continue;
                    }
                    if (in_place && cols == NR) {
                        b = g->b + k0 * g->ldb + j0 + j;
                        ldb = g->ldb;
                    } else if (in_place) {   /* the last columns: a panel of their own, zero-padded */
                        pack(g, k0, kc, j0 + j, cols, packed);
                        b = packed;
                    }
                    const float *bias_col = g->bias_kind == RTD_GEMM_BIAS_COLUMN ? g->bias + j0 + j : NULL;
                    for (int64_t i = i0; i < i1; i += MR) {
                        const int rows = i1 - i < MR ? (int)(i1 - i) : MR;
                        any_tile(rows, kc, g->a + i * g->lda + k0, g->lda, b, ldb, g->c + i * g->ldc + j0 + j, g->ldc,
                                 cols, first, last, bias_col, g->bias_kind == RTD_GEMM_BIAS_ROW ? g->bias + i : NULL,
                                 g->relu);
                    }
                }
                if (last && g->n_links > 0)   /* the block's rows are finished and still in cache */
                    for (int64_t i = i0; i < i1; i++) chain_row(g, i, j0, nc);
            }
        }
    }
}

static void run_rows(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct rtd_gemm *g = context;
    (void)worker;
    const int64_t m1 = last * MR < g->m ? last * MR : g->m;
    if (first * MR < m1)
        rtd_gemm_block(g, first * MR, m1, 0, g->n);
}

static void run_columns(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct rtd_gemm *g = context;
    (void)worker;
    const int64_t n1 = last * NR < g->n ? last * NR : g->n;
    if (first * NR < n1)
        rtd_gemm_block(g, 0, g->m, first * NR, n1);
}

void rtd_gemm_parallel(const struct rtd_gemm *g, int64_t threads)
{
    if (2 * g->m * g->n * g->k / (threads > 0 ? threads : 1) < MIN_FLOPS_PER_THREAD)
        threads = 1;
    const int64_t row_blocks = (g->m + MR - 1) / MR, panels = (g->n + NR - 1) / NR;
    if (threads <= 1)
        rtd_gemm_block(g, 0, g->m, 0, g->n);
    else if (panels >= 4 * threads || panels >= row_blocks)   /* columns: each thread packs only its share of b */
        rtd_parallel_for(threads, panels, run_columns, (void *)g);
    else
        rtd_parallel_for(threads, row_blocks, run_rows, (void *)g);
}

int64_t rtd_gemm_packed_len(int64_t k, int64_t n)
{
    return k < 1 || n < 1 ? -1 : (n + NR - 1) / NR * NR * k;
}

int rtd_gemm_pack(const float *b, int64_t b_len, int b_transposed, int64_t k, int64_t n, float *packed, int64_t packed_len)
{
    if (k < 1 || n < 1)
        return RTD_NATIVE_E_ARGUMENT;
    if (b_len != k * n || packed_len != rtd_gemm_packed_len(k, n))
        return RTD_NATIVE_E_LENGTH;
    const struct rtd_gemm g = {.b = b, .ldb = b_transposed ? k : n, .b_layout = b_transposed ? RTD_GEMM_B_COLUMNS : RTD_GEMM_B_ROWS,
                               .n = n, .k = k};
    for (int64_t j = 0; j < n; j += NR)
        pack(&g, 0, k, j, n - j < NR ? n - j : NR, packed + j / NR * k * NR);
    return 0;
}

int rtd_gemm_rows(const float *a, int64_t a_len, const float *b, int64_t b_len, int b_layout,
                  const float *bias, int64_t bias_len, float *c, int64_t c_len,
                  int64_t m, int64_t k, int64_t n, int relu)
{
    if (m < 1 || k < 1 || n < 1 || b_layout < RTD_GEMM_B_ROWS || b_layout > RTD_GEMM_B_PACKED)
        return RTD_NATIVE_E_ARGUMENT;
    if (a_len != m * k || b_len != (b_layout == RTD_GEMM_B_PACKED ? rtd_gemm_packed_len(k, n) : k * n) || c_len != m * n
        || (bias != NULL && bias_len != n))
        return RTD_NATIVE_E_LENGTH;
    const struct rtd_gemm g = {.a = a, .lda = k, .b = b, .ldb = b_layout == RTD_GEMM_B_COLUMNS ? k : n,
                               .b_layout = b_layout, .c = c, .ldc = n,
                               .bias = bias, .bias_kind = bias != NULL ? RTD_GEMM_BIAS_COLUMN : RTD_GEMM_BIAS_NONE,
                               .relu = relu, .m = m, .n = n, .k = k};
    rtd_gemm_parallel(&g, rtd_threads());
    return 0;
}

struct batched { struct rtd_gemm g; int64_t a_step, b_step, c_step; };

static void run_batches(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct batched *p = context;
    (void)worker;
    for (int64_t i = first; i < last; i++) {
        struct rtd_gemm g = p->g;
        g.a += i * p->a_step;
        g.b += i * p->b_step;
        g.c += i * p->c_step;
        rtd_gemm_block(&g, 0, g.m, 0, g.n);
    }
}

int rtd_gemm_batched(const float *a, int64_t a_len, const float *b, int64_t b_len, int b_layout, float *c, int64_t c_len,
                     int64_t batch, int64_t m, int64_t k, int64_t n, int64_t a_step, int64_t b_step)
{
    if (batch < 1 || m < 1 || k < 1 || n < 1 || a_step < 0 || b_step < 0
        || (b_layout != RTD_GEMM_B_ROWS && b_layout != RTD_GEMM_B_COLUMNS))
        return RTD_NATIVE_E_ARGUMENT;
    if (a_len < (batch - 1) * a_step + m * k || b_len < (batch - 1) * b_step + k * n || c_len != batch * m * n)
        return RTD_NATIVE_E_LENGTH;
    struct batched p = {.g = {.a = a, .lda = k, .b = b, .ldb = b_layout == RTD_GEMM_B_COLUMNS ? k : n, .b_layout = b_layout,
                              .c = c, .ldc = n, .bias_kind = RTD_GEMM_BIAS_NONE, .m = m, .n = n, .k = k},
                        .a_step = a_step, .b_step = b_step, .c_step = m * n};
    int64_t threads = rtd_threads();
    if (2 * batch * m * n * k / (threads > 0 ? threads : 1) < MIN_FLOPS_PER_THREAD)
        threads = 1;
    if (threads <= 1 || batch >= threads) {   /* whole products per thread: no split of one product's rows */
        rtd_parallel_for(threads, batch, run_batches, &p);
        return 0;
    }
    for (int64_t i = 0; i < batch; i++) {
        struct rtd_gemm g = p.g;
        g.a += i * a_step;
        g.b += i * b_step;
        g.c += i * p.c_step;
        rtd_gemm_parallel(&g, threads);
    }
    return 0;
}
