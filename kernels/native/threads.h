/* How many threads rtd's compiled kernels may use (the tenant's CPU quota): cffi reads the
   declarations below as they are. */
void rtd_set_threads(int64_t threads);
int64_t rtd_threads(void);
