/* The GPU worker's SIGSYS handler: what seccomp's SECCOMP_RET_TRAP hands it (the call's number
 * and first arguments) is kept in a ring, and the call returns EPERM. The cffi interface
 * (build_sigsys.py); see sigsys.c. */
typedef struct {
    unsigned long seq;       /* 1 + its index in the ring's history once written; 0 while being written */
    long nr;                 /* the system call number */
    unsigned long args[3];   /* its first three arguments (ioctl's command, mmap's prot, open's flags) */
    int error;               /* the errno the call returned */
} rtd_trapped;

int rtd_sigsys_arm(void);
unsigned long rtd_sigsys_count(void);
int rtd_sigsys_read(unsigned long index, rtd_trapped *out);
