// json.c — JSON files read whole and checked (see json.h).
#include "core/json.h"
#include "core/alloc.h"
#include "core/util.h"
#include <errno.h>
#include <string.h>

static int cmp_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

const char *json_duplicate_key(const cJSON *j) {
    int n = 0;
    for (const cJSON *e = j->child; e; e = e->next) n++;
    const char *dup = NULL;
    if (cJSON_IsObject(j) && n > 1) {
        const cJSON **v = ted_alloc(sizeof *v * (size_t)n, MEM_TEMP);
        n = 0;
        for (const cJSON *e = j->child; e; e = e->next) v[n++] = e;
        qsort(v, (size_t)n, sizeof *v, cmp_key);
        for (int i = 1; i < n && !dup; i++)
            if (!strcmp(v[i - 1]->string, v[i]->string)) dup = v[i]->string;
        ted_free(v);
    }
    for (const cJSON *e = j->child; e && !dup; e = e->next) dup = json_duplicate_key(e);
    return dup;
}

cJSON *json_read_object(const char *path) {
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) { ted_error("%s: cannot read: %s", path, strerror(errno)); return NULL; }
    cJSON *j = cJSON_ParseWithLength(text, len);
    ted_free(text);
    const char *dup = cJSON_IsObject(j) ? json_duplicate_key(j) : NULL;
    if (!cJSON_IsObject(j)) ted_error("%s: malformed JSON (%s)", path, j ? "the top level is not an object" : "does not parse");
    else if (dup) ted_error("%s: key \"%.100s\" appears twice in one object", path, dup);
    if (cJSON_IsObject(j) && !dup) return j;
    cJSON_Delete(j);
    return NULL;
}
