// cluster.c — reading a cluster file (see cluster.h).
#include "perf/cluster.h"
#include "core/alloc.h"
#include "core/json.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

// A number member of o in (lo, hi]; 0 or -1 after one line.
static int member(const char *file, const cJSON *o, const char *sect, const char *key, double lo, double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > lo && v->valuedouble <= hi)) {
        ted_error("%s: \"%s%s%s\" must be a number in (%g, %g]", file, sect, *sect ? "." : "", key, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

// Every member of o is one of keys (NULL-terminated); else one line naming the first other.
static int only(const char *file, const cJSON *o, const char *sect, const char *const *keys) {
    const cJSON *x;
    cJSON_ArrayForEach(x, o) {
        int known = 0;
        for (int i = 0; keys[i]; i++) known |= !strcmp(x->string, keys[i]);
        if (!known) { ted_error("%s: unknown key \"%s%s%s\"", file, sect, *sect ? "." : "", x->string); return -1; }
    }
    return 0;
}

static int link_of(const char *file, const cJSON *root, const char *sect, Link *l) {
    static const char *const keys[] = {"bandwidth_gbs", "latency_us", "burst_kb", NULL};
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, sect);
    if (!cJSON_IsObject(o)) { ted_error("%s: \"%s\" must be an object {bandwidth_gbs, latency_us}", file, sect); return -1; }
    double bw, lat, burst = 0;
    if (only(file, o, sect, keys) || member(file, o, sect, "bandwidth_gbs", 0, 1e6, &bw) ||
        member(file, o, sect, "latency_us", -1e-9, 1e6, &lat) ||
        (cJSON_GetObjectItemCaseSensitive(o, "burst_kb") && member(file, o, sect, "burst_kb", -1e-9, 1e9, &burst)))
        return -1;
    l->bw = bw * 1e9;
    l->lat = lat * 1e-6;
    l->burst = burst * 1e3;
    return 0;
}

// device.kind: "cpu" (the default) or "cuda" (a GPU per device: ted train --device cuda).
static int kind_of(const char *file, const cJSON *d, int *gpu) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(d, "kind");
    *gpu = 0;
    if (!k) return 0;
    if (cJSON_IsString(k) && (!strcmp(k->valuestring, "cpu") || !strcmp(k->valuestring, "cuda"))) {
        *gpu = k->valuestring[1] == 'u';
        return 0;
    }
    ted_error("%s: \"device.kind\" must be \"cpu\" or \"cuda\"", file);
    return -1;
}

static int parse(Cluster *c, const char *file, const cJSON *root) {
    static const char *const top[] = {"name", "nodes", "devices_per_node", "device", "intra", "inter", "note", NULL};
    static const char *const dev[] = {"peak_tflops", "gemm_efficiency", "memory_gb", "kind", "shared_by", "meet_us", NULL};
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name"), *d = cJSON_GetObjectItemCaseSensitive(root, "device");
    double nodes, per, tf, mem;
    if (only(file, root, "", top)) return -1;
    if (!cJSON_IsString(name)) { ted_error("%s: \"name\" must be a string", file); return -1; }
    if (!cJSON_IsObject(d)) { ted_error("%s: \"device\" must be an object {peak_tflops, gemm_efficiency, memory_gb}", file); return -1; }
    if (member(file, root, "", "nodes", 0, 1e6, &nodes) || member(file, root, "", "devices_per_node", 0, 1024, &per) ||
        only(file, d, "device", dev) || member(file, d, "device", "peak_tflops", 0, 1e6, &tf) ||
        member(file, d, "device", "gemm_efficiency", 0, 1, &c->gemm_eff) || member(file, d, "device", "memory_gb", 0, 1e6, &mem) ||
        link_of(file, root, "intra", &c->intra) || link_of(file, root, "inter", &c->inter))
        return -1;
    if (kind_of(file, d, &c->gpu)) return -1;
    c->shared_by = 1;
    if (cJSON_GetObjectItemCaseSensitive(d, "shared_by") && member(file, d, "device", "shared_by", 0, 1024, &c->shared_by))
        return -1;
    if (c->shared_by < 1) { ted_error("%s: \"device.shared_by\" counts devices per compute unit: at least 1", file); return -1; }
    double meet = 0;
    if (cJSON_GetObjectItemCaseSensitive(d, "meet_us") && member(file, d, "device", "meet_us", -1e-9, 1e7, &meet)) return -1;
    c->meet = meet * 1e-6;
    if (nodes != floor(nodes) || per != floor(per)) { ted_error("%s: \"nodes\" and \"devices_per_node\" must be integers", file); return -1; }
    if (nodes * per > 1e6) {   // the layouts tune enumerates grow with the devices: ted tune --gpus's bound
        ted_error("%s: \"nodes\" x \"devices_per_node\" = %.0f devices, more than 1000000", file, nodes * per);
        return -1;
    }
    snprintf(c->name, sizeof c->name, "%s", name->valuestring);
    c->nodes = (int)nodes; c->per_node = (int)per;
    c->peak = tf * 1e12; c->mem = mem * 1e9;
    return 0;
}

// The file `what` names: itself when it exists or holds a '/', else a preset.
static void resolve(const char *what, char *path, size_t n) {
    snprintf(path, n, "%s", what);
    if (access(path, R_OK) == 0 || strchr(what, '/')) return;
    snprintf(path, n, "configs/clusters/%s.json", what);
    if (access(path, R_OK) == 0) return;
    char exe[1024];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return;
    exe[k] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(path, n, "%s/../configs/clusters/%s.json", exe, what);
    if (access(path, R_OK) != 0) snprintf(path, n, "configs/clusters/%s.json", what);
}

int cluster_load(Cluster *c, const char *what) {
    char path[1400];
    resolve(what, path, sizeof path);
    if (access(path, R_OK)) {
        ted_error("--cluster %s: cannot read %s: %s (a file, or a preset of configs/clusters/)", what, path, strerror(errno));
        return -1;
    }
    cJSON *root = json_read_object(path);   // a key twice is refused, not read as its first
    if (!root) return -1;
    memset(c, 0, sizeof *c);
    int rc = parse(c, path, root);
    cJSON_Delete(root);
    return rc;
}
