// agree.c — rank agreement before training (see agree.h). The canonical serialisation is every
// setting the run record prints (config_each_setting: every flag and every JSON key, so a new key
// joins by construction), the layout and the resumed trainer state, as "name=value" entries. The
// ranks compare one digest of it; when they differ, the per-entry digests (one fixed-size
// all-gather: ranks may have been given different argv) find the first differing entry, and the
// differing rank's value travels to rank 0 by a broadcast of fixed size.
#include "io/agree.h"
#include "core/alloc.h"
#include "core/hash.h"
#include "io/ckpt_meta.h"
#include "parallel/comm.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <string.h>

uint64_t agree_hash(const void *p, size_t n, uint64_t h) { return hash_fnv1a(p, n, h); }

enum { AGREE_MAX = 256, NAME_MAX_LEN = 64, VALUE_SHOWN = 200 };
typedef struct {
    int n;
    char name[AGREE_MAX][NAME_MAX_LEN];
    char value[AGREE_MAX][VALUE_SHOWN];   // as shown in the message (long values cut)
    uint64_t h[AGREE_MAX];                // digest of name and the whole value
} Digest;

static void put(Digest *d, const char *name, const char *value) {
    if (d->n >= AGREE_MAX) return;
    snprintf(d->name[d->n], NAME_MAX_LEN, "%s", name);
    snprintf(d->value[d->n], VALUE_SHOWN, "%s", value);
    d->h[d->n++] = agree_hash(value, strlen(value), agree_hash(name, strlen(name) + 1, 0));
}

// A setting; one that is a JSON object (a section such as sparse_attention) as one entry per key.
static void put_setting(void *ctx, const char *name, const char *json, const char *value, char type) {
    (void)json;
    cJSON *o = type == 'r' && value[0] == '{' ? cJSON_Parse(value) : NULL;
    if (!cJSON_IsObject(o)) put(ctx, name, value);
    for (const cJSON *j = o ? o->child : NULL; j; j = j->next) {
        char key[NAME_MAX_LEN], *v = cJSON_PrintUnformatted(j);
        snprintf(key, sizeof key, "%s.%s", name, j->string);
        put(ctx, key, v ? v : "?");
        cJSON_free(v);
    }
    cJSON_Delete(o);
}

static void put_long(Digest *d, const char *name, long long x) {
    char v[32];
    snprintf(v, sizeof v, "%lld", x);
    put(d, name, v);
}

// The resumed trainer state; 0, or -1 after one (deferred) line when it cannot be read.
static int digest_state(Digest *d, const char *ckdir) {
    TrainerState st = {0};
    char p[1300];
    if (ckdir && ckdir[0]) {
        snprintf(p, sizeof p, "%s/trainer_state.json", ckdir);
        if (read_trainer_state(p, &st)) return -1;
    }
    put_long(d, "resumed step", st.step); put_long(d, "resumed adam_t", st.adam_t);
    put_long(d, "resumed run's steps", st.steps); put_long(d, "resumed seed", (long long)st.seed);
    put_long(d, "resumed data_order", st.sequential);
    for (int i = 0; i < 3; i++) put_long(d, "resumed onebit_layout", st.onebit_layout[i]);
    return 0;
}

// The first entry (and lowest rank) where a rank differs from rank 0: 0 when none, else 1.
static int first_difference(const Digest *d, Group *world, int *rank, int *entry) {
    uint64_t whole = agree_hash(d->h, sizeof(uint64_t) * d->n, agree_hash(&d->n, sizeof d->n, 0));
    int P = world->size, differ = 0;
    uint64_t *all = ted_alloc(sizeof(uint64_t) * (AGREE_MAX + 1) * P, MEM_TEMP);
    comm_allgather(world, &whole, all, 1, DT_I64);
    for (int r = 1; r < P; r++) differ |= all[r] != all[0];
    if (differ) {   // every rank knows: all take part in the second, fixed-size exchange
        uint64_t mine[AGREE_MAX + 1] = {(uint64_t)d->n};
        memcpy(mine + 1, d->h, sizeof(uint64_t) * d->n);
        comm_allgather(world, mine, all, AGREE_MAX + 1, DT_I64);
        *rank = -1;
        for (int f = 0; f <= AGREE_MAX && *rank < 0; f++)   // entry 0 is the count of entries
            for (int r = 1; r < P && *rank < 0; r++)
                if (all[(size_t)r * (AGREE_MAX + 1) + f] != all[f]) { *rank = r; *entry = f - 1; }
    }
    ted_free(all);
    return differ;
}

int agree_run(const Config *c, const char *ckdir) {
    Digest *d = ted_alloc(sizeof *d, MEM_TEMP);
    memset(d, 0, sizeof *d);
    put_long(d, "world size", comm_world_size());
    config_each_setting(c, put_setting, d);
    int bad = digest_state(d, ckdir), rank = -1, entry = -1;
    if (ted_agree(bad)) { ted_free(d); return 1; }
    Group world = {GROUP_WORLD, comm_world_size(), comm_world_rank(), MPI_COMM_WORLD, NULL};   // no topology yet
    int differ = world.size > 1 && first_difference(d, &world, &rank, &entry);
    if (differ) {
        char theirs[VALUE_SHOWN];
        snprintf(theirs, sizeof theirs, "%s", entry >= 0 ? d->value[entry] : "");
        if (entry < 0) snprintf(theirs, sizeof theirs, "%d", d->n);
        comm_broadcast(&world, theirs, sizeof theirs, DT_BYTE, rank);
        if (world.rank == 0) {
            char mine[32];
            snprintf(mine, sizeof mine, "%d", d->n);
            fprintf(stderr, "ted: ranks disagree on %s: rank 0 has %s, rank %d has %s (every rank must be given the same "
                    "settings and checkpoint)\n", entry >= 0 ? d->name[entry] : "the number of settings (another ted?)",
                    entry >= 0 ? d->value[entry] : mine, rank, theirs);
            fflush(stderr);
        }
    }
    ted_free(d);
    return differ;
}
