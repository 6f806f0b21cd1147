/* Scatter-add of whole rows (scatter.c): ScatterElements(reduction="add") whose indices are one row index
 * per update row, expanded across the other axes (a graph network's message sum); cffi reads the
 * declaration below as it is (the includer brings <stdint.h>). */

/* out (out_len floats, rows of `width`) gains updates[e] (n_rows rows of `width`) at row rows[e], e in order:
   np.add.at's float32 additions in np.add.at's order, so its bits. 0, or -1 (nothing written) when a length
   disagrees or a row index is outside out. */
int rtd_scatter_add_rows_f32(float *out, int64_t out_len, int64_t width, const int64_t *rows, int64_t n_rows,
                             const float *updates, int64_t updates_len);
