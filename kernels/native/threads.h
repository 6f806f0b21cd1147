/* How many threads rtd's compiled kernels may use (the tenant's CPU quota), and the BLAS entry
   points they call: cffi reads the declarations below as they are. The addresses are NumPy's own
   OpenBLAS (64-bit integers), given once by conv.py when the kernels are imported. */
void rtd_set_threads(int64_t threads);
int64_t rtd_threads(void);
void rtd_set_blas(void *sgemm, void *sgemv);
