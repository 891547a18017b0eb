/*
 * fake libnvidia-ml.so.1 -- the only NVIDIA stand-in fleetmedic's tests use.
 *
 * The real pynvml (nvidia-ml-py 13.x) loads this library with
 * CDLL("libnvidia-ml.so.1") and calls the symbols below with the struct
 * layouts it declares, so the whole Python code path of the checks runs
 * unmodified. Behaviour comes from a JSON scenario file:
 *
 *   $FLEETMEDIC_FAKE_NVML, else /var/lib/fleetmedic-test/nvml.json
 *
 * re-read at every nvmlInit*, so a test can change it between checks. A
 * missing file makes nvmlInit return NVML_ERROR_DRIVER_NOT_LOADED, which is
 * what a node without a loaded driver gives. The keys are documented in
 * tests/fakes/nvml/README.md.
 *
 * Why a hand-rolled JSON parser: the library is bind-mounted into the test
 * fleet's nspawn nodes, whose minbase tree has no libjansson/libjson-c. A
 * dependency-free parser of ~150 lines keeps the .so linked against libc
 * only, needs no -dev package in setup, and vendors no third-party code.
 * It handles the full JSON grammar except that \uXXXX escapes become '?'.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10, NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12, NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17, NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18, NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20, NVML_ERROR_NO_DATA = 21, NVML_ERROR_UNKNOWN = 999,
};

static const struct { int code; const char *name; const char *text; } ERRORS[] = {
    {0, "SUCCESS", "Success"},
    {1, "UNINITIALIZED", "Uninitialized"},
    {2, "INVALID_ARGUMENT", "Invalid Argument"},
    {3, "NOT_SUPPORTED", "Not Supported"},
    {4, "NO_PERMISSION", "Insufficient Permissions"},
    {5, "ALREADY_INITIALIZED", "Already Initialized"},
    {6, "NOT_FOUND", "Not Found"},
    {7, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {8, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {9, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {10, "TIMEOUT", "Timeout"},
    {11, "IRQ_ISSUE", "Interrupt Request Issue"},
    {12, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {13, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {14, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {15, "GPU_IS_LOST", "GPU is lost"},
    {16, "RESET_REQUIRED", "GPU requires restart"},
    {17, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {18, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {19, "IN_USE", "In use by another client"},
    {20, "MEMORY", "Insufficient Memory"},
    {21, "NO_DATA", "No data"},
    {999, "UNKNOWN", "Unknown Error"},
};

/* ------------------------------------------------------------------ JSON */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
typedef struct jval {
    enum jtype t;
    double num;          /* J_NUM, J_BOOL (0/1) */
    char *str;           /* J_STR */
    int n;               /* J_ARR, J_OBJ: number of items */
    char **keys;         /* J_OBJ */
    struct jval **items; /* J_ARR, J_OBJ */
} jval;

typedef struct { const char *s; size_t pos, len; int err; } jparser;

static void jfree(jval *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        jfree(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

static void jws(jparser *p) {
    while (p->pos < p->len && isspace((unsigned char)p->s[p->pos])) p->pos++;
}

static jval *jnew(enum jtype t) {
    jval *v = calloc(1, sizeof *v);
    if (v) v->t = t;
    return v;
}

static jval *jparse_value(jparser *p, int depth);

static char *jparse_string(jparser *p) {
    if (p->pos >= p->len || p->s[p->pos] != '"') { p->err = 1; return NULL; }
    p->pos++;
    size_t cap = 16, n = 0;
    char *out = malloc(cap);
    while (out && p->pos < p->len && p->s[p->pos] != '"') {
        char c = p->s[p->pos++];
        if (c == '\\' && p->pos < p->len) {
            char e = p->s[p->pos++];
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': c = '?'; p->pos += 4; break;
            default: c = e;
            }
        }
        if (n + 2 > cap) { cap *= 2; char *o = realloc(out, cap); if (!o) { free(out); return NULL; } out = o; }
        out[n++] = c;
    }
    if (!out || p->pos >= p->len) { p->err = 1; free(out); return NULL; }
    p->pos++; /* closing quote */
    out[n] = 0;
    return out;
}

static int jpush(jval *v, char *key, jval *item) {
    jval **items = realloc(v->items, (v->n + 1) * sizeof *items);
    if (!items) return -1;
    v->items = items;
    if (v->t == J_OBJ) {
        char **keys = realloc(v->keys, (v->n + 1) * sizeof *keys);
        if (!keys) return -1;
        v->keys = keys;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 0;
}

static jval *jparse_value(jparser *p, int depth) {
    jws(p);
    if (p->pos >= p->len || depth > 64) { p->err = 1; return NULL; }
    char c = p->s[p->pos];
    if (c == '{' || c == '[') {
        jval *v = jnew(c == '{' ? J_OBJ : J_ARR);
        char close = c == '{' ? '}' : ']';
        p->pos++;
        jws(p);
        if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return v; }
        for (;;) {
            char *key = NULL;
            if (v->t == J_OBJ) {
                jws(p);
                key = jparse_string(p);
                jws(p);
                if (!key || p->pos >= p->len || p->s[p->pos] != ':') { free(key); p->err = 1; jfree(v); return NULL; }
                p->pos++;
            }
            jval *item = jparse_value(p, depth + 1);
            if (!item || jpush(v, key, item)) { free(key); jfree(item); jfree(v); p->err = 1; return NULL; }
            jws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
            if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return v; }
            p->err = 1; jfree(v); return NULL;
        }
    }
    if (c == '"') {
        jval *v = jnew(J_STR);
        v->str = jparse_string(p);
        if (!v->str) { jfree(v); return NULL; }
        return v;
    }
    if (!strncmp(p->s + p->pos, "true", 4)) { p->pos += 4; jval *v = jnew(J_BOOL); v->num = 1; return v; }
    if (!strncmp(p->s + p->pos, "false", 5)) { p->pos += 5; return jnew(J_BOOL); }
    if (!strncmp(p->s + p->pos, "null", 4)) { p->pos += 4; return jnew(J_NULL); }
    char *end = NULL;
    double d = strtod(p->s + p->pos, &end);
    if (end == p->s + p->pos) { p->err = 1; return NULL; }
    p->pos = end - p->s;
    jval *v = jnew(J_NUM);
    v->num = d;
    return v;
}

static jval *jget(const jval *obj, const char *key) {
    if (!obj || obj->t != J_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}

static double jnum(const jval *obj, const char *key, double dflt) {
    const jval *v = jget(obj, key);
    if (!v) return dflt;
    if (v->t == J_NUM || v->t == J_BOOL) return v->num;
    if (v->t == J_STR) return strtod(v->str, NULL); /* "0x..." works too */
    return dflt;
}

static const char *jstr(const jval *obj, const char *key, const char *dflt) {
    const jval *v = jget(obj, key);
    return v && v->t == J_STR ? v->str : dflt;
}

/* -------------------------------------------------------------- scenario */

static jval *scenario;   /* parsed scenario of the last nvmlInit */
static int init_count;   /* nvmlInit/nvmlShutdown reference count */

#define MAX_GPUS 64
typedef struct nvmlDevice_st { unsigned index; } *nvmlDevice_t;
static struct nvmlDevice_st devices[MAX_GPUS];
#define MAX_MIG 7 /* MIG devices per GPU (7 compute slices) */
static struct nvmlDevice_st mig_handles[MAX_GPUS * MAX_MIG];

static const jval *gpus(void) {
    const jval *g = jget(scenario, "gpus");
    return g && g->t == J_ARR ? g : NULL;
}

static unsigned gpu_count(void) {
    const jval *g = gpus();
    int n = g ? g->n : 0;
    return n > MAX_GPUS ? MAX_GPUS : n;
}

static const jval *gpu(unsigned i) {
    const jval *g = gpus();
    return g && (int)i < g->n ? g->items[i] : NULL;
}

static int error_code(const jval *v) {
    if (!v) return 0;
    if (v->t == J_NUM) return (int)v->num;
    if (v->t == J_BOOL) return v->num ? NVML_ERROR_UNKNOWN : 0;
    if (v->t != J_STR) return NVML_ERROR_UNKNOWN;
    const char *s = v->str;
    if (!strncmp(s, "NVML_ERROR_", 11)) s += 11;
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++)
        if (!strcmp(ERRORS[i].name, s)) return ERRORS[i].code;
    return NVML_ERROR_UNKNOWN;
}

/* "hang": "fn" | ["fn", ...] | "*" | true, at top level or per GPU */
static int hang_matches(const jval *h, const char *fn) {
    if (!h) return 0;
    if (h->t == J_BOOL) return h->num != 0;
    if (h->t == J_STR) return !strcmp(h->str, fn) || !strcmp(h->str, "*");
    if (h->t == J_ARR)
        for (int i = 0; i < h->n; i++)
            if (hang_matches(h->items[i], fn)) return 1;
    return 0;
}

static void maybe_hang(const jval *where, const char *fn) {
    if (!hang_matches(jget(where, "hang"), fn)) return;
    double secs = jnum(scenario, "hang_seconds", -1);
    if (secs >= 0) {
        struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
        return;
    }
    for (;;) sleep(3600); /* a stuck driver: only SIGKILL ends this */
}

/* errors: {"fn": "GPU_IS_LOST", "*": ...}; per GPU first, then top level */
static int injected_error(const jval *where, const char *fn, int wildcard) {
    const jval *errs = jget(where, "errors");
    const jval *e = jget(errs, fn);
    if (!e && wildcard) e = jget(errs, "*");
    return error_code(e);
}

static nvmlReturn_t sys_pre(const char *fn) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    maybe_hang(scenario, fn);
    return injected_error(scenario, fn, 0);
}

static nvmlReturn_t dev_pre(const char *fn, nvmlDevice_t dev, const jval **g) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!dev || dev < devices || dev >= devices + MAX_GPUS || dev->index >= gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *g = gpu(dev->index);
    maybe_hang(scenario, fn);
    maybe_hang(*g, fn);
    if (jnum(*g, "lost", 0)) return NVML_ERROR_GPU_IS_LOST;
    int rc = injected_error(*g, fn, 1);
    return rc ? rc : injected_error(scenario, fn, 0);
}

#define DEV_PRE(fn) \
    const jval *g = NULL; \
    nvmlReturn_t rc_ = dev_pre(fn, device, &g); \
    if (rc_) return rc_;

static nvmlReturn_t put_string(char *buf, unsigned len, const char *s) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, s);
    return NVML_SUCCESS;
}

static const char *scenario_path(void) {
    const char *p = getenv("FLEETMEDIC_FAKE_NVML");
    return p && *p ? p : "/var/lib/fleetmedic-test/nvml.json";
}

static nvmlReturn_t load_scenario(void) {
    const char *path = scenario_path();
    FILE *f = fopen(path, "rb");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 4096 > cap) { cap = cap ? cap * 2 : 8192; char *b = realloc(buf, cap + 1); if (!b) { free(buf); fclose(f); return NVML_ERROR_MEMORY; } buf = b; }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got);
    fclose(f);
    buf[len] = 0;
    jparser p = {buf, 0, len, 0};
    jval *v = jparse_value(&p, 0);
    jws(&p);
    if (!v || p.err || p.pos != len || v->t != J_OBJ) {
        fprintf(stderr, "fake-nvml: %s: not a JSON object (error near byte %zu)\n", path, p.pos);
        jfree(v);
        free(buf);
        return NVML_ERROR_UNKNOWN;
    }
    free(buf);
    jfree(scenario);
    scenario = v;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------- init, shutdown */

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t rc = load_scenario();
    if (rc) return rc;
    maybe_hang(scenario, "nvmlInit");
    maybe_hang(scenario, "nvmlInitWithFlags");
    rc = error_code(jget(scenario, "init_error"));
    if (!rc) rc = injected_error(scenario, "nvmlInitWithFlags", 0);
    if (!rc) rc = injected_error(scenario, "nvmlInit", 0);
    if (rc) return rc;
    for (unsigned i = 0; i < MAX_GPUS; i++) devices[i].index = i;
    init_count++;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
API nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

API nvmlReturn_t nvmlShutdown(void) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    maybe_hang(scenario, "nvmlShutdown");
    init_count--;
    return NVML_SUCCESS;
}

API const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++)
        if (ERRORS[i].code == result) return ERRORS[i].text;
    return "Unknown Error";
}

/* ---------------------------------------------------------------- system */

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = sys_pre("nvmlSystemGetDriverVersion");
    return rc ? rc : put_string(version, length, jstr(scenario, "driver_version", "550.90.07"));
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = sys_pre("nvmlSystemGetNVMLVersion");
    char buf[96];
    snprintf(buf, sizeof buf, "12.%s", jstr(scenario, "driver_version", "550.90.07"));
    return rc ? rc : put_string(version, length, buf);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    nvmlReturn_t rc = sys_pre("nvmlSystemGetCudaDriverVersion");
    if (rc) return rc;
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = (int)jnum(scenario, "cuda_driver_version", 12040);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t rc = sys_pre("nvmlDeviceGetCount_v2");
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count();
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    const jval *g = NULL;
    nvmlReturn_t rc = dev_pre("nvmlDeviceGetHandleByIndex_v2", &devices[index], &g);
    if (rc) return rc;
    *device = &devices[index];
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* ------------------------------------------------------------ identity */

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    DEV_PRE("nvmlDeviceGetIndex");
    (void)g;
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEV_PRE("nvmlDeviceGetName");
    return put_string(name, length, jstr(g, "name", jstr(scenario, "name", "NVIDIA H100 80GB HBM3")));
}

/* A number of this node (FNV-1a of /etc/machine-id, else of the host name), so that
 * default serials and UUIDs differ between the test fleet's nodes as real ones do; the
 * fake nvidia-smi computes the same (nvidiasmi.node_seed). */
static uint32_t node_seed(void) {
    char text[256] = "";
    FILE *f = fopen("/etc/machine-id", "r");
    if (f) {
        if (!fgets(text, sizeof text, f)) text[0] = 0;
        fclose(f);
    }
    text[strcspn(text, "\r\n")] = 0;
    if (!text[0]) gethostname(text, sizeof text - 1);
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 16777619u;
    return h;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceUUID(nvmlDevice_t device, char *uuid, unsigned int length);
API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (device >= mig_handles && device < mig_handles + MAX_GPUS * MAX_MIG)
        return nvmlDeviceGetMigDeviceUUID(device, uuid, length);
    DEV_PRE("nvmlDeviceGetUUID");
    char dflt[64];
    snprintf(dflt, sizeof dflt, "GPU-%08x-0000-4000-8000-%012x", node_seed(), device->index);
    return put_string(uuid, length, jstr(g, "uuid", dflt));
}

/* The board serial as nvidia-smi -q prints it under "Serial Number" (13 digits). */
API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    DEV_PRE("nvmlDeviceGetSerial");
    char dflt[32];
    snprintf(dflt, sizeof dflt, "1652%07u%02u", node_seed() % 10000000u, device->index % 100);
    return put_string(serial, length, jstr(g, "serial", dflt));
}

API nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *part, unsigned int length) {
    DEV_PRE("nvmlDeviceGetBoardPartNumber");
    return put_string(part, length, jstr(g, "board_part_number", "692-2G520-0200-000"));
}

API nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length) {
    DEV_PRE("nvmlDeviceGetInforomImageVersion");
    return put_string(version, length, jstr(g, "inforom_image_version", "G520.0200.00.05"));
}

API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    DEV_PRE("nvmlDeviceGetVbiosVersion");
    return put_string(version, length, jstr(g, "vbios_version", "96.00.99.00.01"));
}

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout must match pynvml");

static nvmlReturn_t fill_pci(nvmlDevice_t device, const jval *g, nvmlPciInfo_t *pci) {
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    char dflt[32];
    snprintf(dflt, sizeof dflt, "00000000:%02X:00.0", 0x18 + 0x10 * device->index);
    const char *bus_id = jstr(g, "pci_bus_id", dflt);
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", dom, bus, dev, fn);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", dom & 0xffff, bus, dev, fn);
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = (unsigned)jnum(g, "pci_device_id", 0x233010DE);
    pci->pciSubSystemId = (unsigned)jnum(g, "pci_subsystem_id", 0x16C110DE);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEV_PRE("nvmlDeviceGetPciInfo_v3");
    return fill_pci(device, g, pci);
}
API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEV_PRE("nvmlDeviceGetPciInfo_v2");
    return fill_pci(device, g, pci);
}
API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEV_PRE("nvmlDeviceGetPciInfo");
    return fill_pci(device, g, pci);
}

/* ------------------------------------------------------------------- ECC */

static int ecc_enabled(const jval *g) { return jnum(g, "ecc_enabled", 1) != 0; }

API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending) {
    DEV_PRE("nvmlDeviceGetEccMode");
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = ecc_enabled(g);
    return NVML_SUCCESS;
}

/* errorType 0 corrected / 1 uncorrected; counterType 0 volatile / 1 aggregate */
static nvmlReturn_t ecc_count(const jval *g, int type, int counter, unsigned long long *count) {
    static const char *keys[2][2] = {
        {"ecc_volatile_corrected", "ecc_aggregate_corrected"},
        {"ecc_volatile_uncorrected", "ecc_aggregate_uncorrected"},
    };
    if (!count || type < 0 || type > 1 || counter < 0 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!ecc_enabled(g)) return NVML_ERROR_NOT_SUPPORTED;
    double v = jnum(g, keys[type][counter], -1);
    if (v < 0 && counter == 1) v = jnum(g, keys[type][0], 0); /* aggregate >= volatile */
    *count = v < 0 ? 0 : (unsigned long long)v;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                             unsigned long long *eccCounts) {
    DEV_PRE("nvmlDeviceGetTotalEccErrors");
    return ecc_count(g, errorType, counterType, eccCounts);
}

API nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, int errorType, int counterType,
                                                 int locationType, unsigned long long *count) {
    DEV_PRE("nvmlDeviceGetMemoryErrorCounter");
    if (locationType != 2 /* DEVICE_MEMORY/DRAM */) {
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        if (!ecc_enabled(g)) return NVML_ERROR_NOT_SUPPORTED;
        *count = 0;
        return NVML_SUCCESS;
    }
    return ecc_count(g, errorType, counterType, count);
}

/* ------------------------------------------------- page retirement, rows */

static nvmlReturn_t retired_pages(nvmlDevice_t device, const jval *g, int cause, unsigned int *pageCount,
                                  unsigned long long *addresses, unsigned long long *timestamps) {
    if (!pageCount || cause < 0 || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (jnum(g, "retired_pages_supported", 1) == 0) return NVML_ERROR_NOT_SUPPORTED;
    unsigned n = (unsigned)jnum(g, cause ? "retired_pages_dbe" : "retired_pages_sbe", 0);
    if (*pageCount < n || (!addresses && n)) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        addresses[i] = 0x100000ULL * (device->index + 1) + 0x1000ULL * i + (cause ? 0x800 : 0);
        if (timestamps) timestamps[i] = 1700000000ULL + i;
    }
    *pageCount = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                           unsigned long long *addresses) {
    DEV_PRE("nvmlDeviceGetRetiredPages");
    return retired_pages(device, g, cause, pageCount, addresses, NULL);
}

API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                              unsigned long long *addresses, unsigned long long *timestamps) {
    DEV_PRE("nvmlDeviceGetRetiredPages_v2");
    return retired_pages(device, g, cause, pageCount, addresses, timestamps);
}

API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending) {
    DEV_PRE("nvmlDeviceGetRetiredPagesPendingStatus");
    if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
    if (jnum(g, "retired_pages_supported", 1) == 0) return NVML_ERROR_NOT_SUPPORTED;
    *isPending = jnum(g, "retired_pages_pending", 0) != 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                           unsigned int *isPending, unsigned int *failureOccurred) {
    DEV_PRE("nvmlDeviceGetRemappedRows");
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    if (jnum(g, "remapped_rows_supported", 1) == 0) return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = (unsigned)jnum(g, "remapped_rows_correctable", 0);
    *uncRows = (unsigned)jnum(g, "remapped_rows_uncorrectable", 0);
    *isPending = jnum(g, "remapped_rows_pending", 0) != 0;
    *failureOccurred = jnum(g, "remapped_rows_failure", 0) != 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ PCIe */

static nvmlReturn_t uint_field(const jval *g, const char *key, double dflt, unsigned int *out) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned)jnum(g, key, dflt);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *v) {
    DEV_PRE("nvmlDeviceGetCurrPcieLinkGeneration");
    return uint_field(g, "pcie_gen", jnum(g, "pcie_max_gen", 5), v);
}
API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *v) {
    DEV_PRE("nvmlDeviceGetCurrPcieLinkWidth");
    return uint_field(g, "pcie_width", jnum(g, "pcie_max_width", 16), v);
}
API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *v) {
    DEV_PRE("nvmlDeviceGetMaxPcieLinkGeneration");
    return uint_field(g, "pcie_max_gen", 5, v);
}
API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *v) {
    DEV_PRE("nvmlDeviceGetMaxPcieLinkWidth");
    return uint_field(g, "pcie_max_width", 16, v);
}
API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *v) {
    DEV_PRE("nvmlDeviceGetGpuMaxPcieLinkGeneration");
    return uint_field(g, "pcie_max_gen", 5, v);
}

/* ---------------------------------------------------------------- memory */

/* nvmlMemory_t and nvmlMemory_v2_t as pynvml declares them (c_nvmlMemory_t, c_nvmlMemory_v2_t). */
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout must match pynvml");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout must match pynvml");

#define MIB 1048576ULL
/* An H100 80GB HBM3 reports 81559 MiB in total (nvidia-smi -q, "FB Memory Usage"). */
static unsigned long long mem_total(const jval *g) { return (unsigned long long)jnum(g, "memory_total_mib", 81559) * MIB; }
static unsigned long long mem_used(const jval *g) { return (unsigned long long)jnum(g, "memory_used_mib", 0) * MIB; }

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    DEV_PRE("nvmlDeviceGetMemoryInfo");
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = mem_total(g);
    m->used = mem_used(g);
    m->free = m->total > m->used ? m->total - m->used : 0;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    DEV_PRE("nvmlDeviceGetMemoryInfo_v2");
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = mem_total(g);
    m->reserved = 0;
    m->used = mem_used(g);
    m->free = m->total > m->used ? m->total - m->used : 0;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- NVLink */

#define NVML_NVLINK_MAX_LINKS 36 /* pynvml 13.x */

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive) {
    DEV_PRE("nvmlDeviceGetNvLinkState");
    if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
    const jval *links = jget(g, "nvlink");
    if (!links || links->t != J_ARR) return NVML_ERROR_NOT_SUPPORTED;
    if ((int)link >= links->n) return link < NVML_NVLINK_MAX_LINKS ? NVML_ERROR_NOT_SUPPORTED
                                                                    : NVML_ERROR_INVALID_ARGUMENT;
    const jval *s = links->items[link];
    *isActive = (s->t == J_NUM || s->t == J_BOOL) ? s->num != 0
              : (s->t == J_STR && !strcmp(s->str, "active"));
    return NVML_SUCCESS;
}

/* ---------------------------------------------------- clocks, persistence */

API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    DEV_PRE("nvmlDeviceGetCurrentClocksEventReasons");
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = (unsigned long long)jnum(g, "clocks_event_reasons", 0x1 /* GpuIdle */);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    DEV_PRE("nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = (unsigned long long)jnum(g, "clocks_event_reasons", 0x1);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode) {
    DEV_PRE("nvmlDeviceGetPersistenceMode");
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = jnum(g, "persistence_mode", 1) != 0;
    return NVML_SUCCESS;
}

/* --------------------------------------------------------- field values */

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    int nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout must match pynvml");

#define NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230
#define NVML_VALUE_TYPE_UNSIGNED_INT 1

API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    DEV_PRE("nvmlDeviceGetFieldValues");
    if (valuesCount < 0 || (valuesCount && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    const jval *field_errors = jget(g, "field_errors");
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *f = &values[i];
        char key[16];
        snprintf(key, sizeof key, "%u", f->fieldId);
        f->timestamp = (long long)tv.tv_sec * 1000000 + tv.tv_usec;
        f->latencyUsec = 0;
        f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        f->value.ullVal = 0;
        f->nvmlReturn = error_code(jget(field_errors, key));
        if (f->nvmlReturn) continue;
        if (f->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
            f->value.uiVal = (unsigned)jnum(g, "recovery_action", 0);
        } else if (f->fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT) {
            const jval *links = jget(g, "nvlink");
            if (links && links->t == J_ARR) f->value.uiVal = (unsigned)links->n;
            else f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else {
            f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ MIG */
/*
 * A GPU's "mig" object is written by the fake nvidia-smi / nvidia-mig-parted
 * (tests/fakes/nvidia/nvidiasmi.py): {"current", "pending", "boot_id", "gis": [{"id",
 * "profile", "start", "cis": [{"id", "profile"}]}]}. State made in another boot than this
 * one is what a reboot leaves: no instances, and MIG mode only where the GPU keeps it
 * (A100/A30; not from Hopper on). MIG device handles, their UUIDs and their GPU/compute
 * instance ids follow NVML's MIG API (docs.nvidia.com/deploy/nvml-api, "Multi Instance GPU
 * Management").
 */
static void current_boot_id(char *buf, size_t len) {
    const char *p = getenv("FLEETMEDIC_FAKE_BOOT_ID");
    FILE *f = fopen(p && *p ? p : "/proc/sys/kernel/random/boot_id", "r");
    buf[0] = 0;
    if (!f) return;
    if (fgets(buf, (int)len, f)) buf[strcspn(buf, "\r\n")] = 0;
    fclose(f);
}

static int mig_keeps_mode(const jval *g) {
    const jval *p = jget(g, "mig_persistent");
    if (p) return jnum(g, "mig_persistent", 0) != 0;
    const char *nm = jstr(g, "name", jstr(scenario, "name", "NVIDIA H100 80GB HBM3"));
    return strstr(nm, "A100") || strstr(nm, "A30");
}

/* 1 when the GPU's MIG state was made in this boot (or carries no boot id) */
static int mig_this_boot(const jval *mig) {
    const char *made = jstr(mig, "boot_id", NULL);
    if (!made) return 1;
    char now[64];
    current_boot_id(now, sizeof now);
    return !strcmp(made, now);
}

static void mig_mode(const jval *g, unsigned *current, unsigned *pending) {
    const jval *mig = jget(g, "mig");
    unsigned cur = jnum(mig, "current", 0) != 0;
    unsigned pend = jget(mig, "pending") ? jnum(mig, "pending", 0) != 0 : cur;
    if (mig && !mig_this_boot(mig)) cur = pend = mig_keeps_mode(g) ? pend : 0;
    *current = cur;
    *pending = pend;
}

/* the k-th compute instance of the GPU (GIs and their CIs by id order, as listed) */
static int mig_nth(const jval *g, unsigned k, unsigned *gi_id, unsigned *ci_id) {
    const jval *mig = jget(g, "mig");
    unsigned cur, pend;
    mig_mode(g, &cur, &pend);
    if (!cur || !mig_this_boot(mig)) return 0;
    const jval *gis = jget(mig, "gis");
    if (!gis || gis->t != J_ARR) return 0;
    unsigned n = 0;
    for (unsigned want_gi = 0; want_gi < 64; want_gi++)
        for (int i = 0; i < gis->n; i++) {
            if ((unsigned)jnum(gis->items[i], "id", 0) != want_gi) continue;
            const jval *cis = jget(gis->items[i], "cis");
            for (int c = 0; cis && cis->t == J_ARR && c < cis->n; c++) {
                if (n++ == k) {
                    *gi_id = want_gi;
                    *ci_id = (unsigned)jnum(cis->items[c], "id", 0);
                    return 1;
                }
            }
        }
    return 0;
}

static int is_mig_handle(nvmlDevice_t d) {
    return d >= mig_handles && d < mig_handles + MAX_GPUS * MAX_MIG;
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    DEV_PRE("nvmlDeviceGetMigMode");
    if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    mig_mode(g, currentMode, pendingMode);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEV_PRE("nvmlDeviceGetMaxMigDeviceCount");
    (void)g;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = MAX_MIG;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    DEV_PRE("nvmlDeviceGetMigDeviceHandleByIndex");
    if (!migDevice || index >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned cur, pend, gi, ci;
    mig_mode(g, &cur, &pend);
    if (!cur) return NVML_ERROR_NOT_SUPPORTED;
    if (!mig_nth(g, index, &gi, &ci)) return NVML_ERROR_NOT_FOUND;
    /* index = GPU, mig = 1-based slot: the handle keeps both */
    struct nvmlDevice_st *h = &mig_handles[device->index * MAX_MIG + index];
    h->index = device->index * MAX_MIG + index;
    *migDevice = h;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = is_mig_handle(device);
    return NVML_SUCCESS;
}

static nvmlReturn_t mig_ids(nvmlDevice_t device, unsigned *gpu_i, unsigned *gi, unsigned *ci) {
    if (!init_count) return NVML_ERROR_UNINITIALIZED;
    if (!is_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned slot = (unsigned)(device - mig_handles);
    *gpu_i = slot / MAX_MIG;
    if (*gpu_i >= gpu_count() || !mig_nth(gpu(*gpu_i), slot % MAX_MIG, gi, ci)) return NVML_ERROR_NOT_FOUND;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    unsigned gpu_i, gi, ci;
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = mig_ids(device, &gpu_i, &gi, &ci);
    if (!rc) *id = gi;
    return rc;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    unsigned gpu_i, gi, ci;
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = mig_ids(device, &gpu_i, &gi, &ci);
    if (!rc) *id = ci;
    return rc;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    unsigned gpu_i, gi, ci;
    if (!device) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = mig_ids(migDevice, &gpu_i, &gi, &ci);
    if (!rc) *device = &devices[gpu_i];
    return rc;
}

/* the MIG device's UUID, as the fake nvidia-smi -L prints it (nvidiasmi.mig_uuid) */
API nvmlReturn_t nvmlDeviceGetMigDeviceUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    unsigned gpu_i, gi, ci;
    nvmlReturn_t rc = mig_ids(device, &gpu_i, &gi, &ci);
    if (rc) return rc;
    char buf[64];
    snprintf(buf, sizeof buf, "MIG-5a1c%04x-%04x-4%03x-8000-00000000%04x", gpu_i, gi, ci, gpu_i);
    return put_string(uuid, length, buf);
}
