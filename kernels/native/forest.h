/* Tree ensembles as a flat node table walked in C (forest.c); cffi reads the declarations below as
   they are. A node is a branch (key = feature | mode << 24 | missing-goes-true << 27, mode 0..5 for
   <=, <, >=, >, ==, != as TreeEnsemble-5 numbers them; false_next and true_next its successors) or a
   leaf (key -1; false_next its first leaf weight, true_next how many; value its single-target score).
   rtd_forest_new validates and copies the table (NULL and *status < 0 when it does not hold): every
   successor, root, feature, weight range and target in range. A walk takes at most `max_depth` steps
   (the caller's bound on every path, checked as it walks). */
typedef struct rtd_forest rtd_forest;
rtd_forest *rtd_forest_new(int64_t n_nodes, const int32_t *key, const int32_t *false_next, const int32_t *true_next,
                           const double *value, int64_t n_roots, const int32_t *roots, int64_t max_depth,
                           int64_t n_weights, const int32_t *weight_target, const double *weight_value,
                           int64_t n_targets, int64_t n_features, int64_t *status);
void rtd_forest_free(rtd_forest *forest);
/* Per row of x (n_rows x n_columns, n_columns >= the largest feature + 1) and target: the trees'
   leaf weights combined in tree order, in the input's precision (as onnxruntime sums them), into
   scores and has_score (n_rows x n_targets each; 1 where some reached leaf carried the target).
   aggregate 1 sums (0, AVERAGE, too: the caller divides), 2 takes the least, 3 the greatest.
   Returns 0, or < 0 for arguments that do not fit (nothing written) or a walk past max_depth. */
int64_t rtd_forest_score_f32(const rtd_forest *forest, const float *x, int64_t x_len, int64_t n_rows, int64_t n_columns,
                             int64_t aggregate, float *scores, uint8_t *has_score, int64_t out_len);
int64_t rtd_forest_score_f64(const rtd_forest *forest, const double *x, int64_t x_len, int64_t n_rows, int64_t n_columns,
                             int64_t aggregate, double *scores, uint8_t *has_score, int64_t out_len);
/* A tree op's outputs in one call: the walk above, then per row each target's combination v as a double
   (AVERAGE divided by the tree count; NaN where no reached leaf carries the target) read as the op does,
   finite(.) being NaN to 0 and infinities to the largest double of their sign:
   output 0, targets: finite(v + base) (no add when base_len is 0), n_targets scores a row;
   output 1, classes: finite(v) + base, best the first greatest (without base values finite(v), best
   ranking a NaN lowest), n_targets scores a row;
   outputs 2-5, two classes (n_targets 2, base_len <= 2): v0, v1 = finite(v), then with two base values
   v1 = base[1] + v0 and v0 = -v1, with one v0 += base[0]; 2 writes v0, v1 and best = v1 > threshold,
   the others best = v0 > threshold and, s being v0 as a float, 3 writes v0, 4 1 - s and s, 5 -s and s.
   Then, for the post transform the caller applies in NumPy (`transform`, numbered as TreeEnsemble-5's:
   1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO; 0 none here), each row as float less its greatest value (SOFTMAX_ZERO:
   entries within 1e-7 of 0 at -inf) or negated (LOGISTIC). Scores are in the input's type. Returns 0; 1 where
   a softmax row's share may not be e / total (a NaN; SOFTMAX_ZERO's greatest entry kept) or a logistic
   exp may overflow; or < 0 as rtd_forest_score_* (best_len is 0 for targets, n_rows otherwise). */
int64_t rtd_forest_predict_f32(const rtd_forest *forest, const float *x, int64_t x_len, int64_t n_rows, int64_t n_columns,
                               int64_t aggregate, int64_t output, const double *base, int64_t base_len,
                               double threshold, int64_t transform, float *scores, int64_t scores_len, int64_t *best,
                               int64_t best_len);
int64_t rtd_forest_predict_f64(const rtd_forest *forest, const double *x, int64_t x_len, int64_t n_rows, int64_t n_columns,
                               int64_t aggregate, int64_t output, const double *base, int64_t base_len,
                               double threshold, int64_t transform, double *scores, int64_t scores_len, int64_t *best,
                               int64_t best_len);
