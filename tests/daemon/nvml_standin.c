/* A stand-in for libnvidia-ml.so.1 on hosts without NVIDIA's driver: NVML's C ABI for the
 * functions nvidia-ml-py (pynvml) resolves for rtd's watcher, with the GPUs and their
 * processes read from the file named by $RTD_NVML_STANDIN at every call, so a test can
 * change them while a daemon runs. Lines:
 *   gpu <minor> <uuid> <total bytes> <utilization %> <power mW>
 *   proc <minor> <pid> <used bytes>  (or "na": NVML_VALUE_NOT_AVAILABLE, no per-process figure)
 *   mps <minor> <pid> <used bytes>   (an MPS client: nvmlDeviceGetMPSComputeRunningProcesses_v3)
 *   fail <minor> <nvmlReturn_t>      (that GPU's process query returns this error)
 * The pids are written as the driver would report them: the test chooses the host's (a driver
 * that does not translate pids into a container's namespace) or the caller's (one that does).
 * Built by tests/daemon/test_gpu_watch.py with gcc -shared -Wl,-soname,libnvidia-ml.so.1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 8
#define MAX_PROCS 256
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL   /* NVML_VALUE_NOT_AVAILABLE for an unsigned long long */
enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
       NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_UNKNOWN = 999 };

typedef struct { unsigned minor; char uuid[96]; unsigned long long total; unsigned util, power_mw; int fail; } gpu_t;
typedef struct { unsigned minor, pid; unsigned long long used; int mps; } proc_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned gpu, memory; } nvmlUtilization_t;

static gpu_t gpus[MAX_GPUS];
static proc_t procs[MAX_PROCS];
static int n_gpus, n_procs, initialised;

static int load(void) {
    const char *path = getenv("RTD_NVML_STANDIN");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[256];
    if (!f) return NVML_ERROR_UNKNOWN;
    n_gpus = n_procs = 0;
    while (fgets(line, sizeof line, f)) {
        gpu_t g = {0};
        proc_t p = {0};
        unsigned minor;
        int code;
        char kind[8], used[24];
        if (n_gpus < MAX_GPUS && sscanf(line, "gpu %u %95s %llu %u %u", &g.minor, g.uuid, &g.total, &g.util, &g.power_mw) == 5)
            gpus[n_gpus++] = g;
        else if (n_procs < MAX_PROCS && sscanf(line, "%7s %u %u %23s", kind, &p.minor, &p.pid, used) == 4
                 && (!strcmp(kind, "proc") || !strcmp(kind, "mps"))) {
            p.mps = !strcmp(kind, "mps");
            p.used = strcmp(used, "na") ? strtoull(used, NULL, 10) : NOT_AVAILABLE;
            procs[n_procs++] = p;
        }
        else if (sscanf(line, "fail %u %d", &minor, &code) == 2)
            for (int i = 0; i < n_gpus; i++)
                if (gpus[i].minor == minor) gpus[i].fail = code;
    }
    fclose(f);
    return NVML_SUCCESS;
}

/* A device handle is a pointer to its index, stable across reloads of the file. */
static int indices[MAX_GPUS] = {0, 1, 2, 3, 4, 5, 6, 7};
static gpu_t *device(void *handle) {
    int i = handle ? *(int *)handle : -1;
    if (!initialised || load() != NVML_SUCCESS || i < 0 || i >= n_gpus) return NULL;
    return &gpus[i];
}

int nvmlInitWithFlags(unsigned flags) { (void)flags; int r = load(); initialised = r == NVML_SUCCESS; return r; }
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { if (!initialised) return NVML_ERROR_UNINITIALIZED; initialised = 0; return NVML_SUCCESS; }

const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *version, unsigned length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    snprintf(version, length, "0.0.standin");
    return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialised || load() != NVML_SUCCESS) return NVML_ERROR_UNINITIALIZED;
    *count = (unsigned)n_gpus;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    if (!initialised || load() != NVML_SUCCESS) return NVML_ERROR_UNINITIALIZED;
    if (index >= (unsigned)n_gpus) return NVML_ERROR_INVALID_ARGUMENT;
    *handle = &indices[index];
    return NVML_SUCCESS;
}

int nvmlDeviceGetMinorNumber(void *handle, unsigned *minor) {
    gpu_t *g = device(handle);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = g->minor;
    return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned length) {
    gpu_t *g = device(handle);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(uuid, length, "%s", g->uuid);
    return NVML_SUCCESS;
}

int nvmlDeviceGetName(void *handle, char *name, unsigned length) {
    if (!device(handle)) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, length, "rtd NVML stand-in");
    return NVML_SUCCESS;
}

static int running(void *handle, unsigned *count, nvmlProcessInfo_t *infos, int mps) {
    gpu_t *g = device(handle);
    unsigned n = 0;
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->fail) return g->fail;
    for (int i = 0; i < n_procs; i++)
        if (procs[i].minor == g->minor && procs[i].mps == mps) n++;
    if (n == 0) { *count = 0; return NVML_SUCCESS; }
    if (!infos || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    n = 0;
    for (int i = 0; i < n_procs; i++)
        if (procs[i].minor == g->minor && procs[i].mps == mps) {
            nvmlProcessInfo_t info = {procs[i].pid, procs[i].used, 0xFFFFFFFF, 0xFFFFFFFF};
            infos[n++] = info;
        }
    *count = n;
    return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned *count, nvmlProcessInfo_t *infos) {
    return running(handle, count, infos, 0);
}

int nvmlDeviceGetMPSComputeRunningProcesses_v3(void *handle, unsigned *count, nvmlProcessInfo_t *infos) {
    return running(handle, count, infos, 1);
}

int nvmlDeviceGetMemoryInfo(void *handle, nvmlMemory_t *memory) {
    gpu_t *g = device(handle);
    unsigned long long used = 0;
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n_procs; i++)
        if (procs[i].minor == g->minor && procs[i].used != NOT_AVAILABLE) used += procs[i].used;
    memory->total = g->total;
    memory->used = used;
    memory->free = used < g->total ? g->total - used : 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void *handle, nvmlUtilization_t *utilization) {
    gpu_t *g = device(handle);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = g->util;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(void *handle, unsigned *milliwatts) {
    gpu_t *g = device(handle);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = g->power_mw;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMigMode(void *handle, unsigned *current, unsigned *pending) {
    (void)current; (void)pending;
    if (!device(handle)) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;   /* a GPU without MIG, as NVML answers for one */
}
