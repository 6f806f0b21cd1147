/* Tree ensembles (forest.h): TreeEnsembleRegressor / TreeEnsembleClassifier / TreeEnsemble-5 scored
 * over a flat node table built once at load (kernels/ops/_forest.py makes the arrays, this checks
 * and copies them).
 *
 * Results are onnxruntime's, bit for bit before the post transform: comparisons and sums run in the
 * input's precision (float32 input: float32 thresholds and weights, float32 sums), each row's leaf
 * weights added tree by tree in the ensemble's order, a leaf's weights in theirs. Threads never
 * change that order: many rows are split into blocks of rows, each row summed by one thread; a few
 * rows over many trees are walked tree-parallel into a leaf buffer, then summed in tree order.
 *
 * Within a block, the trees are the outer loop (a tree's nodes stay in cache while the block's rows
 * walk it) and the rows the inner one, as onnxruntime does; each step picks its successor without a
 * branch (next[go]).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "forest.h"
#include "parallel.h"
#include "threads.h"

#define FEATURE_BITS 24
#define FEATURE_MASK ((1 << FEATURE_BITS) - 1)
#define MODE(key) (((key) >> FEATURE_BITS) & 7)
#define MISSING_TRUE(key) (((key) >> 27) & 1)
#define MIXED (-1)
#define ROWS_PER_BLOCK 128
#define GROUP_ROWS 4   /* blocks of fewer rows walk trees in groups (walk_*_group) */
#define MIN_ROWS_PER_THREAD 8
#define MIN_TREES_PER_THREAD 32
#define MIN_WALKS_PER_THREAD 256    /* a walk takes 50-150 ns: a few tens of µs per thread repay its start */
#define MAX_LEAF_BUFFER (1 << 22)   /* (row, tree) leaves held at once by a tree-parallel call */

enum { AVERAGE = 0, SUM = 1, MIN = 2, MAX = 3 };

typedef struct {
    int32_t key;       /* a branch's (forest.h); a leaf's -1, or -2 - target where it has one weight (then `value32`) */
    int32_t next[2];   /* [false, true]; a leaf's [first weight, weight count] */
    float value32;
} node_t;

struct rtd_forest {
    node_t *nodes;
    double *value64;   /* thresholds and single-target leaf values for float64 input */
    int64_t n_nodes;
    int32_t *roots;
    int64_t n_roots, max_depth;
    int32_t *weight_target;
    float *weight32;
    double *weight64;
    int64_t n_weights, n_targets, n_features;
    int mode;          /* every branch's mode, or MIXED */
};

void rtd_forest_free(rtd_forest *forest)
{
    if (forest == NULL) return;
    free(forest->nodes);
    free(forest->value64);
    free(forest->roots);
    free(forest->weight_target);
    free(forest->weight32);
    free(forest->weight64);
    free(forest);
}

rtd_forest *rtd_forest_new(int64_t n_nodes, const int32_t *key, const int32_t *false_next, const int32_t *true_next,
                           const double *value, int64_t n_roots, const int32_t *roots, int64_t max_depth,
                           int64_t n_weights, const int32_t *weight_target, const double *weight_value,
                           int64_t n_targets, int64_t n_features, int64_t *status)
{
    if (status == NULL) return NULL;
    *status = -1;
    if (n_nodes < 1 || n_nodes > INT32_MAX || n_roots < 1 || n_roots > INT32_MAX || n_weights < 0 || n_weights > INT32_MAX
        || n_targets < 1 || n_features < 1 || n_features > FEATURE_MASK + 1 || max_depth < 0 || max_depth > n_nodes
        || key == NULL || false_next == NULL || true_next == NULL || value == NULL || roots == NULL
        || (n_weights > 0 && (weight_target == NULL || weight_value == NULL)))
        return NULL;
    *status = -2;
    int mode = -2;
    for (int64_t i = 0; i < n_nodes; i++) {
        const int32_t k = key[i];
        if (k < 0) {   /* a leaf: its weights are a range of the weight list */
            if (k != -1 || false_next[i] < 0 || true_next[i] < 0 || (int64_t)false_next[i] + true_next[i] > n_weights)
                return NULL;
            continue;
        }
        if ((k & FEATURE_MASK) >= n_features || MODE(k) > 5 || (k >> 28) != 0
            || false_next[i] < 0 || false_next[i] >= n_nodes || true_next[i] < 0 || true_next[i] >= n_nodes)
            return NULL;
        mode = mode == -2 || mode == MODE(k) ? MODE(k) : MIXED;
    }
    for (int64_t t = 0; t < n_roots; t++)
        if (roots[t] < 0 || roots[t] >= n_nodes) return NULL;
    for (int64_t w = 0; w < n_weights; w++)
        if (weight_target[w] < 0 || weight_target[w] >= n_targets) return NULL;
    *status = -3;
    rtd_forest *forest = calloc(1, sizeof(*forest));
    if (forest == NULL) return NULL;
    forest->nodes = malloc((size_t)n_nodes * sizeof(node_t));
    forest->value64 = malloc((size_t)n_nodes * sizeof(double));
    forest->roots = malloc((size_t)n_roots * sizeof(int32_t));
    forest->weight_target = malloc((size_t)(n_weights + 1) * sizeof(int32_t));
    forest->weight32 = malloc((size_t)(n_weights + 1) * sizeof(float));
    forest->weight64 = malloc((size_t)(n_weights + 1) * sizeof(double));
    if (!forest->nodes || !forest->value64 || !forest->roots || !forest->weight_target || !forest->weight32 || !forest->weight64) {
        rtd_forest_free(forest);
        return NULL;
    }
    for (int64_t i = 0; i < n_nodes; i++) {
        forest->nodes[i] = (node_t){key[i], {false_next[i], true_next[i]}, (float)value[i]};
        if (key[i] < 0 && true_next[i] == 1 && weight_target[false_next[i]] < INT32_MAX - 1)
            forest->nodes[i].key = -2 - weight_target[false_next[i]];   /* its one weight is `value`: the target in the key */
        forest->value64[i] = value[i];
    }
    memcpy(forest->roots, roots, (size_t)n_roots * sizeof(int32_t));
    for (int64_t w = 0; w < n_weights; w++) {
        forest->weight_target[w] = weight_target[w];
        forest->weight32[w] = (float)weight_value[w];
        forest->weight64[w] = weight_value[w];
    }
    forest->n_nodes = n_nodes;
    forest->n_roots = n_roots;
    forest->max_depth = max_depth;
    forest->n_weights = n_weights;
    forest->n_targets = n_targets;
    forest->n_features = n_features;
    forest->mode = mode == -2 ? 0 : mode;   /* no branch at all: any walk stops at its root */
    *status = 0;
    return forest;
}

/* One walk: the leaf `row` reaches from `at`, or -1 past max_depth steps. NaN fails every comparison
 * but != and goes the true way where the node says so; `value` is the threshold in the input's type. */
/* The same walk for up to GROUP trees of one row in lockstep: a lone walk waits on each node's load
 * in turn, GROUP independent ones keep that many loads in flight (one row over many trees). */
#define GROUP 8
#define DEFINE_WALK_GROUP(NAME, T, VALUE, GO)                                                          \
    static inline int NAME##_group(const rtd_forest *f, const int32_t *roots, int64_t n, const T *row, int64_t *leaves) \
    {                                                                                                  \
        const node_t *nodes = f->nodes;                                                                \
        for (int64_t g = 0; g < n; g++) leaves[g] = roots[g];                                          \
        for (int64_t step = 0;; step++) {                                                              \
            int active = 0;                                                                            \
            for (int64_t g = 0; g < n; g++) {                                                          \
                const int64_t at = leaves[g];                                                          \
                const node_t *node = nodes + at;                                                       \
                const int32_t key = node->key;                                                         \
                if (key < 0) continue;                                                                 \
                if (step == f->max_depth) return -1;                                                   \
                active = 1;                                                                            \
                const T v = row[key & FEATURE_MASK];                                                   \
                const T t = VALUE;                                                                     \
                const int go = (GO) | ((v != v) & MISSING_TRUE(key));                                  \
                leaves[g] = node->next[go];                                                            \
            }                                                                                          \
            if (!active) return 0;                                                                     \
        }                                                                                              \
    }
#define COMPARE_LEQ(v, t) ((v) <= (t))
#define COMPARE_LT(v, t) ((v) < (t))
#define COMPARE_GTE(v, t) ((v) >= (t))
#define COMPARE_GT(v, t) ((v) > (t))
#define COMPARE_EQ(v, t) ((v) == (t))
#define COMPARE_NEQ(v, t) ((v) != (t))
#define DEFINE_WALK(NAME, T, VALUE, GO)                                                                \
    static inline int64_t NAME(const rtd_forest *f, int64_t at, const T *row)                          \
    {                                                                                                  \
        const node_t *nodes = f->nodes;                                                                \
        for (int64_t step = 0;; step++) {                                                              \
            const node_t *node = nodes + at;                                                           \
            const int32_t key = node->key;                                                             \
            if (key < 0) return at;                                                                    \
            if (step == f->max_depth) return -1;                                                       \
            const T v = row[key & FEATURE_MASK];                                                       \
            const T t = VALUE;                                                                         \
            const int go = (GO) | ((v != v) & MISSING_TRUE(key));                                      \
            at = node->next[go];                                                                       \
        }                                                                                              \
    }
#define DEFINE_COMPARE_MIXED(SUFFIX, T)                                                                \
    static inline int compare_mixed_##SUFFIX(int32_t key, T v, T t)                                    \
    {                                                                                                  \
        switch (MODE(key)) {                                                                           \
        case 0: return v <= t;                                                                         \
        case 1: return v < t;                                                                          \
        case 2: return v >= t;                                                                         \
        case 3: return v > t;                                                                          \
        case 4: return v == t;                                                                         \
        default: return v != t;                                                                        \
        }                                                                                              \
    }
DEFINE_COMPARE_MIXED(f32, float)
DEFINE_COMPARE_MIXED(f64, double)
#define DEFINE_BOTH(NAME, T, VALUE, GO) DEFINE_WALK(NAME, T, VALUE, GO) DEFINE_WALK_GROUP(NAME, T, VALUE, GO)
#define DEFINE_WALKS(T, VALUE)                                                                         \
    DEFINE_BOTH(walk_leq_##T, T, VALUE, COMPARE_LEQ(v, t))                                             \
    DEFINE_BOTH(walk_lt_##T, T, VALUE, COMPARE_LT(v, t))                                               \
    DEFINE_BOTH(walk_gte_##T, T, VALUE, COMPARE_GTE(v, t))                                             \
    DEFINE_BOTH(walk_gt_##T, T, VALUE, COMPARE_GT(v, t))                                               \
    DEFINE_BOTH(walk_eq_##T, T, VALUE, COMPARE_EQ(v, t))                                               \
    DEFINE_BOTH(walk_neq_##T, T, VALUE, COMPARE_NEQ(v, t))                                             \
    DEFINE_BOTH(walk_mixed_##T, T, VALUE, compare_mixed_##T(key, v, t))
typedef float f32;
typedef double f64;
DEFINE_WALKS(f32, node->value32)
DEFINE_WALKS(f64, f->value64[at])

/* What a reached leaf adds to a row's scores (n_targets of them from `out`), in the input's type. */
#define DEFINE_ADD(T, LEAF_VALUE, WEIGHT)                                                              \
    static inline void add_##T(const rtd_forest *f, int64_t leaf, int aggregate, T *out, uint8_t *has) \
    {                                                                                                  \
        const node_t *node = f->nodes + leaf;                                                          \
        const int32_t key = node->key;                                                                 \
        /* one weight, kept in the node (its target in the key): nothing more to load; a single target */ \
        /* adds the leaf's own value (its first weight), as onnxruntime keeps */                       \
        if (key < -1 || (f->n_targets == 1 && node->next[1] != 0)) {                                   \
            const int64_t t = key < -1 ? -2 - (int64_t)key : 0;                                        \
            const T v = LEAF_VALUE;                                                                    \
            if (aggregate == MIN) out[t] = !has[t] || v < out[t] ? v : out[t];                         \
            else if (aggregate == MAX) out[t] = !has[t] || v > out[t] ? v : out[t];                    \
            else out[t] += v;                                                                          \
            has[t] = 1;                                                                                \
            return;                                                                                    \
        }                                                                                              \
        if (node->next[1] == 0) return;   /* a leaf without weights scores nothing */                  \
        for (int64_t w = node->next[0], end = w + node->next[1]; w < end; w++) {                       \
            const int32_t t = f->weight_target[w];                                                     \
            const T v = WEIGHT;                                                                        \
            if (aggregate == MIN) out[t] = !has[t] || v < out[t] ? v : out[t];                         \
            else if (aggregate == MAX) out[t] = !has[t] || v > out[t] ? v : out[t];                    \
            else out[t] += v;                                                                          \
            has[t] = 1;                                                                                \
        }                                                                                              \
    }
DEFINE_ADD(f32, node->value32, f->weight32[w])
DEFINE_ADD(f64, f->value64[leaf], f->weight64[w])

typedef struct {
    const rtd_forest *forest;
    const void *x;
    int64_t n_rows, n_columns, block, aggregate;
    void *scores;
    uint8_t *has;
    int32_t *leaves;    /* tree-parallel: [n_rows, n_roots] */
    int failed;         /* a walk went past max_depth (written by any thread, read after the join) */
} job_t;

/* The walk over trees [t0, t1) for rows [r0, r1), each reached leaf handed to ON_LEAF(row, tree, leaf). */
#define WALK_TREES(T, WALK, ON_LEAF)                                                                   \
    if (r1 - r0 < GROUP_ROWS) {   /* few rows: each row through GROUP trees at once */                 \
        int64_t leaves[GROUP];                                                                         \
        for (int64_t r = r0; r < r1; r++)                                                              \
            for (int64_t first_tree = t0; first_tree < t1; first_tree += GROUP) {                      \
                const int64_t n = t1 - first_tree < GROUP ? t1 - first_tree : GROUP;                   \
                if (WALK##_group(f, f->roots + first_tree, n, x + r * job->n_columns, leaves) < 0) {   \
                    __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);                               \
                    return;                                                                            \
                }                                                                                      \
                for (int64_t g = 0; g < n; g++) ON_LEAF(r, first_tree + g, leaves[g]);                \
            }                                                                                          \
    } else                                                                                             \
    for (int64_t tree = t0; tree < t1; tree++) {                                                       \
        const int64_t root = f->roots[tree];                                                           \
        for (int64_t r = r0; r < r1; r++) {                                                            \
            const int64_t leaf = WALK(f, root, x + r * job->n_columns);                                \
            if (leaf < 0) { __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED); return; }             \
            ON_LEAF(r, tree, leaf);                                                                    \
        }                                                                                              \
    }
#define DISPATCH_WALK(T, ON_LEAF)                                                                      \
    switch (f->mode) {                                                                                 \
    case 0: WALK_TREES(T, walk_leq_##T, ON_LEAF) break;                                                \
    case 1: WALK_TREES(T, walk_lt_##T, ON_LEAF) break;                                                 \
    case 2: WALK_TREES(T, walk_gte_##T, ON_LEAF) break;                                                \
    case 3: WALK_TREES(T, walk_gt_##T, ON_LEAF) break;                                                 \
    case 4: WALK_TREES(T, walk_eq_##T, ON_LEAF) break;                                                 \
    case 5: WALK_TREES(T, walk_neq_##T, ON_LEAF) break;                                                \
    default: WALK_TREES(T, walk_mixed_##T, ON_LEAF) break;                                             \
    }

#define DEFINE_BODIES(T)                                                                               \
    /* Row-parallel: blocks [first, last) of `block` rows, each row's scores summed in tree order. */ \
    static void score_rows_##T(void *ctx, int64_t worker, int64_t first, int64_t last)                 \
    {                                                                                                  \
        (void)worker;                                                                                  \
        job_t *job = ctx;                                                                              \
        const rtd_forest *f = job->forest;                                                             \
        const T *x = job->x;                                                                           \
        T *scores = job->scores;                                                                       \
        const int64_t n_targets = f->n_targets, t0 = 0, t1 = f->n_roots;                               \
        for (int64_t b = first; b < last; b++) {                                                       \
            const int64_t r0 = b * job->block;                                                         \
            const int64_t r1 = r0 + job->block < job->n_rows ? r0 + job->block : job->n_rows;          \
            DISPATCH_WALK(T, ADD_ROW_##T)                                                              \
        }                                                                                              \
    }                                                                                                  \
    /* Tree-parallel: trees [first, last) for every row, their leaves kept for the sum after. */      \
    static void walk_trees_##T(void *ctx, int64_t worker, int64_t first, int64_t last)                 \
    {                                                                                                  \
        (void)worker;                                                                                  \
        job_t *job = ctx;                                                                              \
        const rtd_forest *f = job->forest;                                                             \
        const T *x = job->x;                                                                           \
        const int64_t t0 = first, t1 = last, r0 = 0, r1 = job->n_rows;                                 \
        DISPATCH_WALK(T, KEEP_LEAF)                                                                    \
    }                                                                                                  \
    /* After a tree-parallel walk: rows [first, last) summed from their leaves in tree order. */      \
    static void add_leaves_##T(void *ctx, int64_t worker, int64_t first, int64_t last)                 \
    {                                                                                                  \
        (void)worker;                                                                                  \
        job_t *job = ctx;                                                                              \
        const rtd_forest *f = job->forest;                                                             \
        T *scores = job->scores;                                                                       \
        for (int64_t r = first; r < last; r++)                                                         \
            for (int64_t tree = 0; tree < f->n_roots; tree++)                                          \
                add_##T(f, job->leaves[r * f->n_roots + tree], (int)job->aggregate,                    \
                        scores + r * f->n_targets, job->has + r * f->n_targets);                       \
    }
#define ADD_ROW_f32(r, tree, leaf) add_f32(f, leaf, (int)job->aggregate, scores + (r) * n_targets, job->has + (r) * n_targets)
#define ADD_ROW_f64(r, tree, leaf) add_f64(f, leaf, (int)job->aggregate, scores + (r) * n_targets, job->has + (r) * n_targets)
#define KEEP_LEAF(r, tree, leaf) (job->leaves[(r) * f->n_roots + (tree)] = (int32_t)(leaf))
DEFINE_BODIES(f32)
DEFINE_BODIES(f64)

static int64_t score(const rtd_forest *f, const void *x, int64_t x_len, int64_t n_rows, int64_t n_columns, int64_t aggregate,
                     void *scores, size_t score_size, uint8_t *has, int64_t out_len,
                     void (*rows_body)(void *, int64_t, int64_t, int64_t), void (*trees_body)(void *, int64_t, int64_t, int64_t),
                     void (*sum_body)(void *, int64_t, int64_t, int64_t))
{
    if (f == NULL || n_rows < 0 || n_columns < f->n_features || aggregate < AVERAGE || aggregate > MAX
        || (n_rows > 0 && n_columns > INT64_MAX / n_rows) || x_len < n_rows * n_columns
        || n_rows > INT64_MAX / f->n_targets || out_len != n_rows * f->n_targets)
        return -1;
    if (n_rows == 0) return 0;
    if (x == NULL || scores == NULL || has == NULL) return -1;
    memset(scores, 0, (size_t)out_len * score_size);
    memset(has, 0, (size_t)out_len);
    job_t job = {f, x, n_rows, n_columns, ROWS_PER_BLOCK, aggregate, scores, has, NULL, 0};
    int64_t threads = rtd_threads();
    const int64_t walks = n_rows * f->n_roots;
    if (walks / MIN_WALKS_PER_THREAD < threads) threads = walks / MIN_WALKS_PER_THREAD > 1 ? walks / MIN_WALKS_PER_THREAD : 1;
    if (threads > 1 && n_rows < threads * MIN_ROWS_PER_THREAD && f->n_roots >= threads * MIN_TREES_PER_THREAD
        && walks <= MAX_LEAF_BUFFER) {
        job.leaves = malloc((size_t)walks * sizeof(int32_t));
        if (job.leaves != NULL) {
            rtd_parallel_for(threads, f->n_roots, trees_body, &job);
            if (!job.failed) rtd_parallel_for(threads, n_rows, sum_body, &job);
            free(job.leaves);
            return job.failed ? -2 : 0;
        }
    }
    if (threads > 1) {   /* blocks small enough that every thread gets some, large enough to keep a tree in cache */
        job.block = (n_rows + threads - 1) / threads;
        job.block = job.block < MIN_ROWS_PER_THREAD ? MIN_ROWS_PER_THREAD : job.block > ROWS_PER_BLOCK ? ROWS_PER_BLOCK : job.block;
    }
    rtd_parallel_for(threads, (n_rows + job.block - 1) / job.block, rows_body, &job);
    return job.failed ? -2 : 0;
}

/* A tree op's outputs from a row's combined weights v (double, NaN where no reached leaf carries a target), as
 * kernels/ops/op_ml_tree_ensemble*.py compute them in NumPy (the reference, whose float64 steps these repeat). */
enum { TARGETS = 0, CLASSES = 1, BINARY_PAIR = 2, BINARY_PROBIT = 3, BINARY_COMPLEMENT = 4, BINARY_SIGNED = 5 };

static inline double finite(double v, double nan) { return v != v ? nan : v > DBL_MAX ? DBL_MAX : v < -DBL_MAX ? -DBL_MAX : v; }

/* A row's outputs into out (its width of them; out may be v) and *best. */
static void finish(int64_t output, int64_t n, double *v, const double *base, int64_t base_len, double threshold,
                   double *out, int64_t *best)
{
    if (output == TARGETS) {
        for (int64_t t = 0; t < n; t++) out[t] = finite(base_len ? v[t] + base[t] : v[t], 0.0);
        return;
    }
    if (output == CLASSES) {   /* the first greatest; without base values a target no leaf scored ranks lowest */
        int64_t top = 0;
        double top_rank = 0.0;
        for (int64_t t = 0; t < n; t++) {
            const double rank = base_len ? finite(v[t], 0.0) + base[t] : finite(v[t], -INFINITY);
            if (t == 0 || rank > top_rank) top = t, top_rank = rank;
        }
        for (int64_t t = 0; t < n; t++) out[t] = base_len ? finite(v[t], 0.0) + base[t] : finite(v[t], 0.0);
        *best = top;
        return;
    }
    double v0 = finite(v[0], 0.0), v1 = finite(v[1], 0.0);
    if (base_len == 2) {   /* onnxruntime's reading: class 1 is base[1] + the first column's score */
        v1 = base[1] + v0;
        v0 = -v1;
    } else if (base_len == 1) {
        v0 += base[0];
    }
    const float s = (float)v0;
    switch (output) {
    case BINARY_PAIR: out[0] = v0; out[1] = v1; break;
    case BINARY_PROBIT: out[0] = v0; break;
    case BINARY_COMPLEMENT: out[0] = 1.0f - s; out[1] = s; break;
    default: out[0] = -s; out[1] = s; break;
    }
    *best = (output == BINARY_PAIR ? v1 : v0) > threshold;
}

/* What the caller's NumPy post transform starts from (POST_TRANSFORMS numbering: SOFTMAX 1, LOGISTIC 2,
 * SOFTMAX_ZERO 3; others 0), in place over a row's outputs rounded to float: a softmax row less its greatest
 * value (SOFTMAX_ZERO's entries within 1e-7 of 0 at -inf, whose exp is the 0 it keeps), a logistic row
 * negated. Returns 1 where the quick reading of what follows does not hold: a softmax row whose share may
 * not be e / total (a NaN difference; SOFTMAX_ZERO's greatest entry kept at 0), a logistic one whose exp may
 * overflow. */
enum { SOFTMAX = 1, LOGISTIC = 2, SOFTMAX_ZERO = 3 };

static int prepare(int64_t transform, int64_t width, double *o)
{
    int careful = 0;
    if (transform == LOGISTIC) {
        for (int64_t k = 0; k < width; k++) {
            const float e = -(float)o[k];
            careful |= e > 88.0f;
            o[k] = e;
        }
        return careful;
    }
    if (transform != SOFTMAX && transform != SOFTMAX_ZERO) return 0;
    float top = (float)o[0];
    for (int64_t k = 1; k < width; k++) top = (float)o[k] > top ? (float)o[k] : top;
    const int zero = transform == SOFTMAX_ZERO;
    careful = zero && !(fabsf(top) > 1e-7f);
    for (int64_t k = 0; k < width; k++) {
        const float v = (float)o[k], e = v - top;
        const int kept = !zero || fabsf(v) > 1e-7f;
        careful |= kept && e != e;
        o[k] = kept ? e : -INFINITY;
    }
    return careful;
}

#define DEFINE_PREDICT(T, SCORE)                                                                      \
    int64_t rtd_forest_predict_##T(const rtd_forest *forest, const T *x, int64_t x_len, int64_t n_rows, int64_t n_columns, \
                                   int64_t aggregate, int64_t output, const double *base, int64_t base_len,  \
                                   double threshold, int64_t transform, T *scores, int64_t scores_len, int64_t *best, \
                                   int64_t best_len)                                                   \
    {                                                                                                  \
        if (forest == NULL || output < TARGETS || output > BINARY_SIGNED || n_rows < 0 || base_len < 0 \
            || transform < 0 || transform > SOFTMAX_ZERO                                               \
            || (base_len > 0 && base == NULL))                                                         \
            return -1;                                                                                 \
        const int64_t n = forest->n_targets, width = output <= BINARY_PAIR ? n : output == BINARY_PROBIT ? 1 : 2; \
        if (output >= BINARY_PAIR ? n != 2 || base_len > 2 : base_len != 0 && base_len != n)          \
            return -1;                                                                                 \
        if (n_rows > INT64_MAX / n || scores_len != n_rows * width || best_len != (output == TARGETS ? 0 : n_rows)) \
            return -1;                                                                                 \
        if (n_rows == 0) return SCORE(forest, x, x_len, 0, n_columns, aggregate, NULL, NULL, 0);       \
        if (scores == NULL || (output != TARGETS && best == NULL)) return -1;                          \
        T *sums = malloc((size_t)(n_rows * n) * sizeof(T));                                            \
        uint8_t *has = malloc((size_t)(n_rows * n));                                                   \
        double *row = malloc((size_t)(n + 2) * sizeof(double));                                        \
        int64_t status = sums && has && row ? SCORE(forest, x, x_len, n_rows, n_columns, aggregate, sums, has, n_rows * n) : -3; \
        int careful = 0;                                                                               \
        for (int64_t r = 0; status == 0 && r < n_rows; r++) {                                          \
            double out[2];                                                                             \
            for (int64_t t = 0; t < n; t++) {                                                          \
                const double v = has[r * n + t] ? (double)sums[r * n + t] : NAN;                      \
                row[t] = aggregate == AVERAGE ? v / (double)forest->n_roots : v;                       \
            }                                                                                          \
            double *o = output < BINARY_PAIR ? row : out;   /* a binary row's two are copies */         \
            finish(output, n, row, base, base_len, threshold, o, output == TARGETS ? NULL : best + r); \
            careful |= prepare(transform, width, o);                                                   \
            for (int64_t k = 0; k < width; k++) scores[r * width + k] = (T)o[k];                       \
        }                                                                                              \
        free(sums);                                                                                    \
        free(has);                                                                                     \
        free(row);                                                                                     \
        return status == 0 ? careful : status;                                                         \
    }

int64_t rtd_forest_score_f32(const rtd_forest *forest, const float *x, int64_t x_len, int64_t n_rows, int64_t n_columns,
                             int64_t aggregate, float *scores, uint8_t *has_score, int64_t out_len)
{
    return score(forest, x, x_len, n_rows, n_columns, aggregate, scores, sizeof(float), has_score, out_len,
                 score_rows_f32, walk_trees_f32, add_leaves_f32);
}

int64_t rtd_forest_score_f64(const rtd_forest *forest, const double *x, int64_t x_len, int64_t n_rows, int64_t n_columns,
                             int64_t aggregate, double *scores, uint8_t *has_score, int64_t out_len)
{
    return score(forest, x, x_len, n_rows, n_columns, aggregate, scores, sizeof(double), has_score, out_len,
                 score_rows_f64, walk_trees_f64, add_leaves_f64);
}

DEFINE_PREDICT(f32, rtd_forest_score_f32)
DEFINE_PREDICT(f64, rtd_forest_score_f64)
